#include "net/accept_backoff.hpp"

#include <algorithm>
#include <utility>

namespace troupe::net {

std::optional<uint64_t> LogThrottle::record(Clock::time_point now) {
  ++num_suppressed_;
  if (last_line_ && now - *last_line_ < interval_) return std::nullopt;
  last_line_ = now;
  return std::exchange(num_suppressed_, 0);
}

AcceptBackoff::AcceptBackoff(AcceptBackoffConfig config)
    : config_(config), next_delay_(config.initial_delay), log_throttle_(config.log_interval) {}

AcceptBackoff::Decision AcceptBackoff::on_failure(AcceptFailure failure, Clock::time_point now) {
  Decision decision;
  switch (failure) {
    case AcceptFailure::kConnectionGone:
      break;  // the next pending connection is unaffected: no wait, and the delay does not grow
    case AcceptFailure::kOutOfResources:
    case AcceptFailure::kUnexpected:
      decision.delay = next_delay_;
      next_delay_ = std::min(next_delay_ * 2, config_.max_delay);
      break;
  }
  ++num_episode_failures_;
  if (const std::optional<uint64_t> num_failures = log_throttle_.record(now)) {
    decision.log = true;
    decision.num_failures = *num_failures;
    episode_reported_ = true;
  }
  return decision;
}

std::optional<uint64_t> AcceptBackoff::on_success() {
  next_delay_ = config_.initial_delay;
  std::optional<uint64_t> reported;
  if (episode_reported_) reported = num_episode_failures_;
  num_episode_failures_ = 0;
  episode_reported_ = false;
  return reported;
}

}  // namespace troupe::net
