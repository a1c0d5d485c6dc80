// Per-key rate limits (issue 41), as hosted APIs have them: requests per minute (RPM) and tokens
// per minute (TPM) for each API key, from api.rate_limit_rpm / api.rate_limit_tpm (every key) or
// the keys file's `rpm=` / `tpm=` columns (that key). 0 is no limit.
//
// Each limit is a token bucket holding up to the limit and refilling at limit / 60 per second:
// a key may spend its whole minute at once, then goes at its rate. Admission takes one request
// from the request bucket and needs a positive token balance; a request's tokens (prompt +
// completion, as its usage reports them) are taken when it ends, because only then are they known
// — a large request may leave the balance below zero, and the key then waits until it refills.
// Every surface asks here: the OpenAI routes (429), the WebSocket chat (an error frame), batch
// items (/v1/batch: the item's 429 line; /v1/batches: the item waits and runs later).
//
// What clients see is OpenAI's: x-ratelimit-limit-{requests,tokens},
// x-ratelimit-remaining-{requests,tokens}, x-ratelimit-reset-{requests,tokens} (Go durations:
// "1s", "6m0s", "20ms": until the bucket is full again) on every response of a limited key, and
// on a refusal 429 with Retry-After (whole seconds until the request would be admitted) and
// error type "requests" or "tokens", code "rate_limit_exceeded".
//
// Thread-safety: KeyRateLimiter's members may be called from any thread (one mutex; each call
// is a few map and float operations). The free functions are pure.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "net/api_keys.hpp"  // RateLimits
#include "net/http_types.hpp"

namespace troupe::net {

// One key's standing at one moment: what the headers and `troupe admin keys` show.
struct RateLimitStatus {
  RateLimits limits;
  int64_t remaining_requests = 0;  // whole requests and tokens left now (0 when in debt)
  int64_t remaining_tokens = 0;
  double reset_requests_s = 0;  // until the bucket is full again
  double reset_tokens_s = 0;
};

struct RateDecision {
  bool admitted = true;
  bool limited = false;      // the key has a limit: the headers apply
  std::string exceeded;      // "requests" or "tokens" when refused
  double retry_after_s = 0;  // when refused: until a request would be admitted
  RateLimitStatus status;
};

// A bucket of `capacity` refilling capacity / 60 per second; its level may go negative (debt).
class RateBucket {
 public:
  RateBucket() = default;
  RateBucket(double capacity, double now_s) : level_(capacity), updated_s_(now_s) {}
  void refill(double capacity, double now_s);
  double level() const { return level_; }
  void take(double amount) { level_ -= amount; }
  // Seconds until the level reaches `wanted` (0 when it has).
  double seconds_until(double capacity, double wanted) const;

 private:
  double level_ = 0;
  double updated_s_ = 0;
};

struct KeyUsage {
  std::string name;
  RateLimitStatus status;
  int64_t requests = 0;  // admitted since start
  int64_t tokens = 0;    // charged since start
  int64_t refused = 0;   // 429s since start
};

class KeyRateLimiter {
 public:
  // Every key's limits, by name (at start and after each key reload). Keys kept keep their
  // buckets (clamped to a lowered limit); new keys start full; keys gone are forgotten.
  void set_limits(const std::vector<std::pair<std::string, RateLimits>>& limits, double now_s);

  // Admits one request of `key_name` (empty or unknown: no limit, always admitted) and takes it
  // from the request bucket; a refusal takes nothing. `counted`: a refusal is a 429 someone
  // sees (false for a durable batch item, which just waits for its turn).
  RateDecision admit(std::string_view key_name, double now_s, bool counted = true);
  // The tokens a finished request used (prompt + completion).
  void charge_tokens(std::string_view key_name, int64_t tokens, double now_s);

  std::vector<KeyUsage> usage(double now_s) const;  // by name

 private:
  struct KeyState {
    RateLimits limits;
    RateBucket requests, tokens;
    int64_t num_requests = 0, num_tokens = 0, num_refused = 0;
  };
  static void refill(KeyState& key, double now_s);
  static RateLimitStatus status_of(const KeyState& key);

  mutable std::mutex mutex_;
  std::map<std::string, KeyState, std::less<>> keys_;
};

// The x-ratelimit-* headers of a limited key's decision (none for an unlimited one).
std::vector<std::pair<std::string, std::string>> rate_limit_headers(const RateDecision& decision);
// The 429 of a refusal: its headers and Retry-After ride on the error.
ApiError rate_limit_error(const RateDecision& decision, std::string_view key_name);
// A Go duration as OpenAI's headers write it: "20ms", "1s", "1.5s", "6m0s".
std::string go_duration(double seconds);
// Seconds on the steady clock (what the limiter's now_s is).
double steady_now_s();

}  // namespace troupe::net
