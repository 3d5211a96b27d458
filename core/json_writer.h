// JsonWriter: a small streaming JSON writer for reports and traces (the CLI's --json output,
// Chrome trace files). Produces compact, valid JSON; non-finite numbers become null.
//
// Usage: w.BeginObject(); w.Key("x"); w.Number(1.5); w.EndObject(); w.str().
// Nesting is tracked so commas are placed correctly; misuse (a value where a key is due) is a
// programming error caught by a debug check. Not thread-safe.
#ifndef OCTOPIPE_CORE_JSON_WRITER_H_
#define OCTOPIPE_CORE_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace octopipe {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(absl::string_view key);
  JsonWriter& String(absl::string_view value);
  JsonWriter& Number(double value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();

  // Key + value shorthands.
  JsonWriter& Field(absl::string_view key, absl::string_view value) {
    return Key(key).String(value);
  }
  JsonWriter& Field(absl::string_view key, const char* value) {
    return Key(key).String(value);
  }
  JsonWriter& Field(absl::string_view key, double value) { return Key(key).Number(value); }
  JsonWriter& Field(absl::string_view key, int value) { return Key(key).Int(value); }
  JsonWriter& Field(absl::string_view key, int64_t value) { return Key(key).Int(value); }
  JsonWriter& Field(absl::string_view key, bool value) { return Key(key).Bool(value); }

  const std::string& str() const { return out_; }

  static std::string Escape(absl::string_view s);

 private:
  void BeforeValue();

  std::string out_;
  // One entry per open container: true once it holds an element.
  std::vector<bool> has_element_;
  bool after_key_ = false;
};

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_JSON_WRITER_H_
