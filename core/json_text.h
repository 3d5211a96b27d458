// JSON documents for the CLI's --json output, Chrome traces and benchmark lines, on
// nlohmann-json (header-only, so core stays free of protobuf; wire types use protobuf's own JSON
// mapping in core:convert instead).
//
// Contract: `Json` keeps object members in insertion order, so output lists fields in the order
// the code writes them. JsonText() is compact (no whitespace), writes non-finite numbers as
// null, and replaces invalid UTF-8 in strings with U+FFFD instead of throwing. Reading JSON:
// use nlohmann::json::parse directly and turn its parse_error into an absl::Status at the
// library boundary (see core/profile_importer.cc).
#ifndef OCTOPIPE_CORE_JSON_TEXT_H_
#define OCTOPIPE_CORE_JSON_TEXT_H_

#include <string>

#include <nlohmann/json.hpp>

namespace octopipe {

using Json = nlohmann::ordered_json;

inline std::string JsonText(const Json& j) {
  return j.dump(/*indent=*/-1, /*indent_char=*/' ', /*ensure_ascii=*/false,
                Json::error_handler_t::replace);
}

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_JSON_TEXT_H_
