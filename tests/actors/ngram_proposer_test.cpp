// Prompt-lookup drafts (issue 21): the longest suffix n-gram in [min, max], its most recent
// earlier occurrence, up to k following tokens.
#include "actors/scheduler/ngram_proposer.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace troupe::scheduler {
namespace {

std::vector<int32_t> propose(const std::vector<int32_t>& tokens, int32_t min_n, int32_t max_n,
                             int32_t k) {
  std::vector<int32_t> draft = {99, 99};  // cleared by the call
  propose_ngram(tokens, {min_n, max_n, k}, draft);
  return draft;
}

TEST(NgramProposer, ProposesWhatFollowedTheSuffixEarlier) {
  // suffix "1 2 3" occurred at the start, followed by 4 5 6 7.
  EXPECT_EQ(propose({1, 2, 3, 4, 5, 6, 7, 9, 1, 2, 3}, 3, 3, 3), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(propose({1, 2, 3, 4, 5, 6, 7, 9, 1, 2, 3}, 1, 3, 10),
            (std::vector<int32_t>{4, 5, 6, 7, 9, 1, 2, 3}));
}

TEST(NgramProposer, NothingWithoutAMatchOfAtLeastMin) {
  EXPECT_TRUE(propose({1, 2, 3, 4, 5}, 1, 3, 4).empty());
  // "7 3" never occurred before; "3" did, but min is 2.
  EXPECT_TRUE(propose({3, 4, 5, 7, 3}, 2, 3, 4).empty());
  EXPECT_EQ(propose({3, 4, 5, 7, 3}, 1, 3, 4), (std::vector<int32_t>{4, 5, 7, 3}));
  EXPECT_TRUE(propose({5}, 1, 1, 4).empty());
  EXPECT_TRUE(propose({}, 1, 1, 4).empty());
  EXPECT_TRUE(propose({1, 1, 1}, 1, 1, 0).empty());
}

TEST(NgramProposer, LongestMatchWinsThenMostRecent) {
  // Suffix "8 2": "2" alone last occurred before 6, but "8 2" occurred before 4.
  EXPECT_EQ(propose({8, 2, 4, 0, 2, 6, 8, 2}, 1, 2, 1), (std::vector<int32_t>{4}));
  // Two occurrences of "5 6": the most recent one's continuation wins.
  EXPECT_EQ(propose({5, 6, 1, 5, 6, 2, 5, 6}, 2, 2, 1), (std::vector<int32_t>{2}));
  // max caps the length looked for: with max 1 the most recent "2" wins.
  EXPECT_EQ(propose({8, 2, 4, 0, 2, 6, 8, 2}, 1, 1, 1), (std::vector<int32_t>{6}));
}

TEST(NgramProposer, ProposalStopsAtTheEndOfTheSequence) {
  // "1 1" repeated: the match right before the suffix leaves one token to propose.
  EXPECT_EQ(propose({1, 1, 1}, 2, 2, 5), (std::vector<int32_t>{1}));
  EXPECT_EQ(propose({7, 1, 2, 7, 1, 2, 7}, 1, 3, 8), (std::vector<int32_t>{1, 2, 7}));
}

}  // namespace
}  // namespace troupe::scheduler
