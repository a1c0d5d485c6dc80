#include "net/json_writer.hpp"

#include <gtest/gtest.h>

#include <limits>

namespace troupe::net {
namespace {

TEST(JsonWriter, WritesNestedContainersWithCommas) {
  JsonWriter w;
  w.begin_object().field("a", 1).key("b").begin_array().value(true).null().value("x").end_array();
  w.key("c").begin_object().end_object().end_object();
  EXPECT_EQ(w.str(), R"({"a":1,"b":[true,null,"x"],"c":{}})");
}

TEST(JsonWriter, EscapesStrings) {
  std::string out;
  append_json_string(out, "q\"b\\n\n\t\x01\x7f");
  EXPECT_EQ(out, R"("q\"b\\n\n\t\u0001\u007f")");
}

TEST(JsonWriter, KeepsValidUtf8AndReplacesInvalidBytes) {
  std::string out;
  append_json_string(out, "caf\xC3\xA9 \xF0\x9F\x98\x80");
  EXPECT_EQ(out, "\"caf\xC3\xA9 \xF0\x9F\x98\x80\"");
  out.clear();
  // A lone continuation byte, a cut-short sequence, an overlong encoding and a surrogate.
  append_json_string(out, "a\x80" "b\xE2\x82" "c\xC0\xAF" "d\xED\xA0\x80");
  EXPECT_EQ(out, "\"a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD"
                 "d\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");
}

TEST(JsonWriter, NonFiniteNumbersBecomeNull) {
  JsonWriter w;
  w.begin_array().value(std::numeric_limits<double>::infinity()).value(0.5).end_array();
  EXPECT_EQ(w.str(), "[null,0.5]");
}

}  // namespace
}  // namespace troupe::net
