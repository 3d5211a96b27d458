// JsonValue: a parsed JSON document (RFC 8259), so that core can read data files (measured
// profiles) without depending on protobuf — only //core:convert may (see DESIGN.md).
//
// Contract: ParseJson accepts exactly one JSON value surrounded by optional whitespace; it
// rejects trailing text, duplicate object keys, unescaped control characters, invalid escapes
// and numbers that overflow a double, with kInvalidArgument naming line:column. Nesting is
// limited to 256 levels. Numbers are doubles. Objects keep document order. Immutable after
// parsing; safe to share const.
#ifndef OCTOPIPE_CORE_JSON_H_
#define OCTOPIPE_CORE_JSON_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace octopipe {

class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  JsonValue() = default;

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // Accessors return the zero value when the type differs.
  bool bool_value() const { return bool_; }
  double number() const { return number_; }
  const std::string& string() const { return string_; }
  // Array elements, or an object's member values (in the order of keys()).
  const std::vector<JsonValue>& items() const { return items_; }
  // Object member names; empty for other types.
  const std::vector<std::string>& keys() const { return keys_; }
  // The member named `key`, or nullptr (also when this is not an object).
  const JsonValue* Find(absl::string_view key) const;

 private:
  friend class JsonParser;
  Type type_ = Type::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<JsonValue> items_;
  std::vector<std::string> keys_;
};

absl::string_view JsonTypeName(JsonValue::Type type);

absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_JSON_H_
