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

// One token can hold a stop string twice ("\n\n" for stop "\n"): the text ends before the
// first, or a newline leaks.
TEST(StopMatcher, AStopStringTwiceInOnePieceStopsAtTheFirst) {
  StopMatcher m({"\n"});
  auto r = m.push("a\n\nb");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "a");
  StopMatcher at_start({"\n"});
  r = at_start.push("\n\n");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  StopMatcher inclusive({"\n"}, /*include_stop_string=*/true);
  EXPECT_EQ(inclusive.push("a\n\nb").text, "a\n");
}

// Two stop strings matching at one position: with the stop string included in the output, the
// longer one is what the text ends with, whatever their order in the request.
TEST(StopMatcher, AtOnePositionTheLongerStopStringWins) {
  StopMatcher m({"ab", "abc"}, /*include_stop_string=*/true);
  auto r = m.push("xxabcd");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "xxabc");
  StopMatcher reversed({"abc", "ab"}, /*include_stop_string=*/true);
  EXPECT_EQ(reversed.push("xxabcd").text, "xxabc");
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
