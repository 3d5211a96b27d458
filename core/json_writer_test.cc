#include "core/json_writer.h"

#include <limits>

#include "gtest/gtest.h"

namespace octopipe {
namespace {

TEST(JsonWriterTest, NestsWithCommasAndEscapes) {
  JsonWriter w;
  w.BeginObject()
      .Field("name", "a\"b\\c\n")
      .Field("n", 3)
      .Key("list")
      .BeginArray()
      .Number(1.5)
      .Number(std::numeric_limits<double>::infinity())
      .BeginObject()
      .Field("ok", true)
      .EndObject()
      .EndArray()
      .Key("empty")
      .BeginObject()
      .EndObject()
      .EndObject();
  EXPECT_EQ(w.str(),
            R"({"name":"a\"b\\c\n","n":3,"list":[1.5,null,{"ok":true}],"empty":{}})");
}

TEST(JsonWriterTest, NumbersKeepPrecision) {
  JsonWriter w;
  w.BeginArray().Number(0.1 + 0.2).Number(1e-9).Number(27).EndArray();
  EXPECT_EQ(w.str(), "[0.3,1e-09,27]");
}

}  // namespace
}  // namespace octopipe
