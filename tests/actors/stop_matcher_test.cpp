#include "actors/ingress/stop_matcher.hpp"

#include <gtest/gtest.h>

namespace troupe::ingress {
namespace {

TEST(StopMatcher, PassesTextThroughWithoutStopStrings) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc").text, "abc");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, HoldsBackAPossiblePrefixAndStops) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("Hello wor").text, "Hello wor");
  auto r = m.push("ld ST");
  EXPECT_EQ(r.text, "ld ");
  EXPECT_FALSE(r.stopped);
  r = m.push("OP and more");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(m.push("x").text.empty());
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, ReleasesHeldTextWhenThePrefixBreaks) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("a ST").text, "a ");
  EXPECT_EQ(m.push("ART").text, "START");
  EXPECT_EQ(m.push("S").text, "");
  EXPECT_EQ(m.flush(), "S");
}

TEST(StopMatcher, EarliestMatchWinsAndCanIncludeTheStopString) {
  StopMatcher m({"bb", "a"});
  auto r = m.push("xxabbb");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "xx");
  StopMatcher inclusive({"\n\n"}, /*include_stop_string=*/true);
  r = inclusive.push("line\n\nnext");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "line\n\n");
}

TEST(StopMatcher, MatchesAcrossManySmallPieces) {
  StopMatcher m({"<|end|>"});
  std::string out;
  bool stopped = false;
  for (char c : std::string("answer<|en<|end|>tail")) {
    auto r = m.push(std::string(1, c));
    out += r.text;
    stopped = stopped || r.stopped;
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "answer<|en");
}

}  // namespace
}  // namespace troupe::ingress
