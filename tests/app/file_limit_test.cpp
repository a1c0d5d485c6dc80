// raise_open_file_limit: `troupe serve` lifts the soft RLIMIT_NOFILE to the hard one at start
// (issue 14). The test lowers its own soft limit first, so there is something to raise.
#include "app/file_limit.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>

namespace troupe::app {
namespace {

TEST(OpenFileLimit, SoftLimitIsRaisedToTheHardLimit) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < 128) GTEST_SKIP() << "hard limit too low";
  rlimit lowered = saved;
  lowered.rlim_cur = 100;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);

  const OpenFileLimit limit = raise_open_file_limit();
  EXPECT_EQ(limit.error, 0);
  EXPECT_EQ(limit.before, 100u);
  rlimit now{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_EQ(limit.soft, now.rlim_cur);
  if (saved.rlim_max != RLIM_INFINITY) {
    EXPECT_EQ(now.rlim_cur, saved.rlim_max);
  }
  EXPECT_GT(now.rlim_cur, 100u);
  EXPECT_NE(describe(limit).find("raised from 100"), std::string::npos) << describe(limit);

  // Already at the hard limit: nothing to do, and it says so.
  const OpenFileLimit again = raise_open_file_limit();
  EXPECT_EQ(again.before, again.soft);
  EXPECT_EQ(describe(again).find("raised"), std::string::npos) << describe(again);
  ::setrlimit(RLIMIT_NOFILE, &saved);
}

}  // namespace
}  // namespace troupe::app
