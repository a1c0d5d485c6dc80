// How the HTTP listener paces itself after accept() fails (issue 14). A failure that says the
// process or the system is out of a resource (EMFILE: no file descriptor left; ENFILE, ENOBUFS,
// ENOMEM) fails again at once while the pending connection keeps the listening socket readable,
// so retrying immediately spins a core and floods the log. The listener instead waits before the
// next accept: 50 ms, doubling up to 1 s, and back to 50 ms after a success.
//
// Warnings are rate-limited: the first failure is logged, then at most one line per
// `log_interval`, carrying the number of failures it stands for. After a success the listener
// may say once that it is accepting again, but only for an episode that produced a warning, so
// the log stays at two lines per interval at most however the failures and successes alternate.
//
// Thread-safety: plain values owned by the listener coroutine. No clock: callers pass `now`.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace troupe::net {

enum class AcceptFailure : uint8_t {
  kConnectionGone,  // ECONNABORTED, EPROTO, ...: that one connection failed; retry at once
  kOutOfResources,  // EMFILE, ENFILE, ENOBUFS, ENOMEM: wait for something to be freed
  kUnexpected,      // anything else: back off too, so an unknown lasting error cannot spin
};

// Lets one log line through per interval; the line says how many events it stands for.
class LogThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LogThrottle(std::chrono::milliseconds interval) : interval_(interval) {}

  // Records one event. Returns the events to report (this one included, and every one
  // suppressed since the last line) when a line may be written now; nullopt when not.
  std::optional<uint64_t> record(Clock::time_point now);

 private:
  std::chrono::milliseconds interval_;
  std::optional<Clock::time_point> last_line_;
  uint64_t num_suppressed_ = 0;
};

struct AcceptBackoffConfig {
  std::chrono::milliseconds initial_delay{50};
  std::chrono::milliseconds max_delay{1'000};
  std::chrono::milliseconds log_interval{5'000};
};

class AcceptBackoff {
 public:
  using Clock = std::chrono::steady_clock;

  struct Decision {
    std::chrono::milliseconds delay{0};  // wait this long before the next accept
    bool log = false;                    // write a warning for this failure now
    uint64_t num_failures = 0;  // when logging: failures since the previous warning, this one too
  };

  explicit AcceptBackoff(AcceptBackoffConfig config = {});

  Decision on_failure(AcceptFailure failure, Clock::time_point now);

  // An accept succeeded: the next failure waits the initial delay again. Returns the failures of
  // the episode that just ended when it was reported (worth an "accepting again" line).
  std::optional<uint64_t> on_success();

 private:
  AcceptBackoffConfig config_;
  std::chrono::milliseconds next_delay_;
  LogThrottle log_throttle_;
  uint64_t num_episode_failures_ = 0;  // failures since the last success
  bool episode_reported_ = false;      // a warning was written since the last success
};

}  // namespace troupe::net
