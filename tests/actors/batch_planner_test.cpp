// The batch actor's feeding policy (actors/batch/batch_planner.hpp): at most max_in_flight items
// in the engine, oldest batch first, parked items retried only after release_parked(), a stopped
// batch drops what it had not started.
#include "actors/batch/batch_planner.hpp"

#include <gtest/gtest.h>

namespace troupe::batch {
namespace {

std::vector<std::pair<std::string, int64_t>> pairs(const std::vector<ItemStart>& starts) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const ItemStart& s : starts) out.emplace_back(s.batch_id, s.index);
  return out;
}

using Pairs = std::vector<std::pair<std::string, int64_t>>;

TEST(BatchPlanner, BoundsTheItemsInFlightAcrossBatchesOldestFirst) {
  BatchPlanner planner(3);
  planner.add("old", {0, 1});
  planner.add("new", {0, 1, 2});
  EXPECT_EQ(pairs(planner.take_starts()), (Pairs{{"old", 0}, {"old", 1}, {"new", 0}}));
  EXPECT_EQ(planner.in_flight(), 3);
  EXPECT_TRUE(planner.take_starts().empty()) << "the bound is reached";
  planner.finished("old", 0, false);
  EXPECT_EQ(pairs(planner.take_starts()), (Pairs{{"new", 1}}));
  EXPECT_EQ(planner.queued(), 1);
  EXPECT_FALSE(planner.idle("old"));
  planner.finished("old", 1, false);
  EXPECT_TRUE(planner.idle("old"));
  EXPECT_FALSE(planner.idle("new"));
}

TEST(BatchPlanner, ABoundAndAStartLimitPerCall) {
  BatchPlanner planner(4);
  planner.add("b", {0, 1, 2, 3, 4, 5});
  EXPECT_EQ(pairs(planner.take_starts(/*bound=*/4, /*max_starts=*/2)), (Pairs{{"b", 0}, {"b", 1}}));
  EXPECT_EQ(pairs(planner.take_starts(4, 2)), (Pairs{{"b", 2}, {"b", 3}}));
  EXPECT_TRUE(planner.take_starts(4, 2).empty()) << "four in flight";
  planner.finished("b", 0, false);
  planner.finished("b", 1, false);
  planner.finished("b", 2, false);
  EXPECT_TRUE(planner.take_starts(/*bound=*/1, 8).empty()) << "a busy bound below what runs";
  EXPECT_EQ(pairs(planner.take_starts(/*bound=*/9, 8)), (Pairs{{"b", 4}, {"b", 5}}));
  EXPECT_EQ(planner.in_flight(), 3);
}

TEST(BatchPlanner, ParkedItemsWaitForTheReleaseThenGoFirst) {
  BatchPlanner planner(2);
  planner.add("b", {0, 1, 2, 3});
  EXPECT_EQ(pairs(planner.take_starts()), (Pairs{{"b", 0}, {"b", 1}}));
  planner.finished("b", 1, /*retry=*/true);
  planner.finished("b", 0, false);
  // Not retried at once (the engine just refused it): the next pending ones go.
  EXPECT_EQ(pairs(planner.take_starts()), (Pairs{{"b", 2}, {"b", 3}}));
  EXPECT_FALSE(planner.idle("b"));
  planner.finished("b", 2, false);
  planner.finished("b", 3, false);
  EXPECT_TRUE(planner.take_starts().empty());
  planner.release_parked();
  EXPECT_EQ(pairs(planner.take_starts()), (Pairs{{"b", 1}}));
}

TEST(BatchPlanner, StopDropsWhatHadNotStartedAndKeepsCountingWhatRuns) {
  BatchPlanner planner(2);
  planner.add("b", {0, 1, 2, 3});
  planner.add("c", {7});
  planner.take_starts();
  EXPECT_EQ(planner.stop("b"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(planner.in_flight_of("b"), (std::vector<int64_t>{0, 1}));
  EXPECT_FALSE(planner.idle("b"));
  EXPECT_TRUE(planner.take_starts().empty()) << "still two in flight";
  planner.finished("b", 0, false);
  planner.finished("b", 1, /*retry=*/true);  // a stopped batch's item is not retried
  planner.release_parked();
  EXPECT_EQ(pairs(planner.take_starts()), (Pairs{{"c", 7}}));
  EXPECT_TRUE(planner.stop("b").empty());
  EXPECT_TRUE(planner.idle("b"));
}

TEST(BatchPlanner, RemovingABatchFreesItsInFlightPlaces) {
  BatchPlanner planner(1);
  planner.add("a", {0});
  planner.add("b", {0});
  planner.take_starts();
  planner.remove("a");
  EXPECT_EQ(planner.in_flight(), 0);
  EXPECT_FALSE(planner.contains("a"));
  EXPECT_EQ(pairs(planner.take_starts()), (Pairs{{"b", 0}}));
  planner.finished("a", 0, false);  // a late completion of a forgotten batch changes nothing
  EXPECT_EQ(planner.in_flight(), 1);
}

}  // namespace
}  // namespace troupe::batch
