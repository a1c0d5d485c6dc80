// AcceptBackoff and LogThrottle: the listener's pacing after failed accepts (issue 14), with
// time passed in by the test.
#include "net/accept_backoff.hpp"

#include <gtest/gtest.h>

namespace troupe::net {
namespace {

using namespace std::chrono_literals;
using Clock = AcceptBackoff::Clock;

TEST(AcceptBackoff, OutOfResourcesWaitsLongerEachTimeUpToTheCap) {
  AcceptBackoff backoff;
  const Clock::time_point t0{};
  std::vector<long> delays;
  for (int i = 0; i < 7; ++i) {
    delays.push_back(
        backoff.on_failure(AcceptFailure::kOutOfResources, t0 + i * 10ms).delay.count());
  }
  EXPECT_EQ(delays, (std::vector<long>{50, 100, 200, 400, 800, 1000, 1000}));
}

TEST(AcceptBackoff, SuccessStartsTheDelayOver) {
  AcceptBackoff backoff;
  const Clock::time_point t0{};
  (void)backoff.on_failure(AcceptFailure::kOutOfResources, t0);
  (void)backoff.on_failure(AcceptFailure::kOutOfResources, t0);
  (void)backoff.on_success();
  EXPECT_EQ(backoff.on_failure(AcceptFailure::kOutOfResources, t0).delay, 50ms);
}

TEST(AcceptBackoff, AFailedConnectionIsRetriedAtOnceAndUnknownErrorsBackOff) {
  AcceptBackoff backoff;
  const Clock::time_point t0{};
  EXPECT_EQ(backoff.on_failure(AcceptFailure::kConnectionGone, t0).delay, 0ms);
  EXPECT_EQ(backoff.on_failure(AcceptFailure::kConnectionGone, t0).delay, 0ms);
  EXPECT_EQ(backoff.on_failure(AcceptFailure::kUnexpected, t0).delay, 50ms);
  EXPECT_EQ(backoff.on_failure(AcceptFailure::kUnexpected, t0).delay, 100ms);
}

TEST(AcceptBackoff, WarnsOncePerIntervalWithTheNumberOfFailures) {
  AcceptBackoff backoff(AcceptBackoffConfig{.log_interval = 5s});
  const Clock::time_point t0{};
  const AcceptBackoff::Decision first = backoff.on_failure(AcceptFailure::kOutOfResources, t0);
  EXPECT_TRUE(first.log);
  EXPECT_EQ(first.num_failures, 1u);
  for (int i = 1; i <= 9; ++i) {
    EXPECT_FALSE(backoff.on_failure(AcceptFailure::kOutOfResources, t0 + i * 500ms).log) << i;
  }
  const AcceptBackoff::Decision next = backoff.on_failure(AcceptFailure::kOutOfResources, t0 + 5s);
  EXPECT_TRUE(next.log);
  EXPECT_EQ(next.num_failures, 10u);  // nine suppressed, and this one
}

TEST(AcceptBackoff, RecoveryIsReportedOnlyForAReportedEpisode) {
  AcceptBackoff backoff(AcceptBackoffConfig{.log_interval = 5s});
  const Clock::time_point t0{};
  EXPECT_FALSE(backoff.on_success().has_value());                // no failures at all
  (void)backoff.on_failure(AcceptFailure::kOutOfResources, t0);  // warned
  (void)backoff.on_failure(AcceptFailure::kOutOfResources, t0 + 1s);
  EXPECT_EQ(backoff.on_success(), std::optional<uint64_t>(2));
  // Within the interval: the failure is not warned about, so neither is the recovery.
  (void)backoff.on_failure(AcceptFailure::kOutOfResources, t0 + 2s);
  EXPECT_FALSE(backoff.on_success().has_value());
}

TEST(LogThrottle, CountsWhatItSuppressed) {
  LogThrottle throttle(1s);
  const Clock::time_point t0{};
  EXPECT_EQ(throttle.record(t0), std::optional<uint64_t>(1));
  EXPECT_FALSE(throttle.record(t0 + 100ms).has_value());
  EXPECT_FALSE(throttle.record(t0 + 900ms).has_value());
  EXPECT_EQ(throttle.record(t0 + 1s), std::optional<uint64_t>(3));
  EXPECT_EQ(throttle.record(t0 + 5s), std::optional<uint64_t>(1));
}

}  // namespace
}  // namespace troupe::net
