// Pins the JSON reader: the value model, escapes, and the errors it must raise.
#include "core/json.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe {
namespace {

using ::testing::HasSubstr;

TEST(JsonTest, ParsesAllValueTypesInOrder) {
  absl::StatusOr<JsonValue> v = ParseJson(R"( {"b": true, "n": -1.5e3, "s": "x", "a": [1, null],
      "o": {}, "f": false} )");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(v->is_object());
  EXPECT_EQ((std::vector<std::string>{"b", "n", "s", "a", "o", "f"}), v->keys());
  EXPECT_TRUE(v->Find("b")->bool_value());
  EXPECT_EQ(-1500.0, v->Find("n")->number());
  EXPECT_EQ("x", v->Find("s")->string());
  ASSERT_EQ(2u, v->Find("a")->items().size());
  EXPECT_EQ(1.0, v->Find("a")->items()[0].number());
  EXPECT_TRUE(v->Find("a")->items()[1].is_null());
  EXPECT_TRUE(v->Find("o")->is_object());
  EXPECT_TRUE(v->Find("f")->is_bool());
  EXPECT_FALSE(v->Find("f")->bool_value());
  EXPECT_EQ(nullptr, v->Find("missing"));
  EXPECT_EQ(nullptr, v->Find("a")->Find("x"));  // not an object
}

TEST(JsonTest, DecodesEscapesAndUnicode) {
  absl::StatusOr<JsonValue> v =
      ParseJson(R"("q\" s\\ /\/ \n\t \u00e9 \u20ac \ud83d\ude00 é")");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ("q\" s\\ // \n\t \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xC3\xA9", v->string());
}

TEST(JsonTest, ParsesNumbersExactly) {
  absl::StatusOr<JsonValue> v = ParseJson("[0, -0.25, 3.3494526572299725, 1E2, 2e-3]");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(0.0, v->items()[0].number());
  EXPECT_EQ(-0.25, v->items()[1].number());
  EXPECT_EQ(3.3494526572299725, v->items()[2].number());
  EXPECT_EQ(100.0, v->items()[3].number());
  EXPECT_EQ(0.002, v->items()[4].number());
}

void ExpectError(absl::string_view text, absl::string_view fragment) {
  absl::StatusOr<JsonValue> v = ParseJson(text);
  ASSERT_EQ(absl::StatusCode::kInvalidArgument, v.status().code()) << text;
  EXPECT_THAT(std::string(v.status().message()), HasSubstr(std::string(fragment))) << text;
}

TEST(JsonTest, RejectsMalformedInputWithPosition) {
  ExpectError("", "line 1, column 1: unexpected end of input");
  ExpectError("{\n  \"a\": 1,\n  \"b\" 2}", "line 3, column 7: expected ':'");
  ExpectError("[1, 2", "expected ',' or ']'");
  ExpectError("[1,]", "unexpected character ']'");
  ExpectError("{\"a\": 1} x", "unexpected text after the JSON value");
  ExpectError("{\"a\": 1, \"a\": 2}", "duplicate key \"a\"");
  ExpectError("01", "unexpected text after");
  ExpectError("1.", "expected a digit after '.'");
  ExpectError("-", "expected a digit");
  ExpectError("1e400", "does not fit a double");
  ExpectError("\"abc", "unterminated string");
  ExpectError("\"a\nb\"", "control character");
  ExpectError("\"\\x\"", "invalid escape '\\x'");
  ExpectError("\"\\ud800\"", "unpaired UTF-16 surrogate");
  ExpectError("tru", "unexpected character 't'");
  ExpectError("NaN", "unexpected character 'N'");
  ExpectError(std::string(300, '['), "nesting deeper than 256 levels");
}

}  // namespace
}  // namespace octopipe
