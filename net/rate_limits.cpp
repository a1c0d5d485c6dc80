// Per-key rate limits (see rate_limits.hpp).
#include "net/rate_limits.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

namespace troupe::net {

void RateBucket::refill(double capacity, double now_s) {
  if (now_s > updated_s_) {
    level_ = std::min(capacity, level_ + capacity / 60.0 * (now_s - updated_s_));
    updated_s_ = now_s;
  }
  level_ = std::min(level_, capacity);  // a lowered limit
}

double RateBucket::seconds_until(double capacity, double wanted) const {
  if (level_ >= wanted || capacity <= 0) return 0;
  return (wanted - level_) / (capacity / 60.0);
}

void KeyRateLimiter::set_limits(const std::vector<std::pair<std::string, RateLimits>>& limits,
                                double now_s) {
  std::lock_guard lock(mutex_);
  std::map<std::string, KeyState, std::less<>> next;
  for (const auto& [name, key_limits] : limits) {
    const auto it = keys_.find(name);
    const bool kept = it != keys_.end();
    KeyState state = kept ? it->second : KeyState{};
    if (kept) refill(state, now_s);
    // A limit newly set starts full; a kept one keeps its balance (clamped when lowered), so a
    // reload never hands a key a fresh minute.
    if (!kept || state.limits.requests_per_minute == 0) {
      state.requests = RateBucket(static_cast<double>(key_limits.requests_per_minute), now_s);
    }
    if (!kept || state.limits.tokens_per_minute == 0) {
      state.tokens = RateBucket(static_cast<double>(key_limits.tokens_per_minute), now_s);
    }
    state.limits = key_limits;
    refill(state, now_s);
    next.emplace(name, state);
  }
  keys_ = std::move(next);
}

void KeyRateLimiter::refill(KeyState& key, double now_s) {
  key.requests.refill(static_cast<double>(key.limits.requests_per_minute), now_s);
  key.tokens.refill(static_cast<double>(key.limits.tokens_per_minute), now_s);
}

RateLimitStatus KeyRateLimiter::status_of(const KeyState& key) {
  const auto rpm = static_cast<double>(key.limits.requests_per_minute);
  const auto tpm = static_cast<double>(key.limits.tokens_per_minute);
  RateLimitStatus s;
  s.limits = key.limits;
  s.remaining_requests = static_cast<int64_t>(std::max(0.0, std::floor(key.requests.level())));
  s.remaining_tokens = static_cast<int64_t>(std::max(0.0, std::floor(key.tokens.level())));
  s.reset_requests_s = key.requests.seconds_until(rpm, rpm);
  s.reset_tokens_s = key.tokens.seconds_until(tpm, tpm);
  return s;
}

RateDecision KeyRateLimiter::admit(std::string_view key_name, double now_s, bool counted) {
  std::lock_guard lock(mutex_);
  RateDecision decision;
  const auto it = keys_.find(key_name);
  if (it == keys_.end()) return decision;
  KeyState& key = it->second;
  refill(key, now_s);
  decision.limited = key.limits.limited();
  const bool requests_limited = key.limits.requests_per_minute > 0;
  const bool tokens_limited = key.limits.tokens_per_minute > 0;
  if (requests_limited && key.requests.level() < 1.0) {
    decision.exceeded = "requests";
    decision.retry_after_s =
        key.requests.seconds_until(static_cast<double>(key.limits.requests_per_minute), 1.0);
  } else if (tokens_limited && key.tokens.level() <= 0.0) {
    decision.exceeded = "tokens";
    // A whole token back, so the next try is admitted rather than refused at zero again.
    decision.retry_after_s =
        key.tokens.seconds_until(static_cast<double>(key.limits.tokens_per_minute), 1.0);
  }
  if (!decision.exceeded.empty()) {
    decision.admitted = false;
    if (counted) ++key.num_refused;
  } else {
    if (requests_limited) key.requests.take(1.0);
    ++key.num_requests;
  }
  decision.status = status_of(key);
  return decision;
}

void KeyRateLimiter::charge_tokens(std::string_view key_name, int64_t tokens, double now_s) {
  std::lock_guard lock(mutex_);
  const auto it = keys_.find(key_name);
  if (it == keys_.end() || tokens <= 0) return;
  KeyState& key = it->second;
  refill(key, now_s);
  if (key.limits.tokens_per_minute > 0) key.tokens.take(static_cast<double>(tokens));
  key.num_tokens += tokens;
}

std::vector<KeyUsage> KeyRateLimiter::usage(double now_s) const {
  std::lock_guard lock(mutex_);
  std::vector<KeyUsage> out;
  for (const auto& [name, stored] : keys_) {
    KeyState key = stored;
    refill(key, now_s);
    out.push_back({name, status_of(key), key.num_requests, key.num_tokens, key.num_refused});
  }
  return out;
}

std::string go_duration(double seconds) {
  if (seconds <= 0) return "0s";
  if (seconds < 1.0) return fmt::format("{}ms", std::max<int64_t>(1, std::llround(seconds * 1000)));
  const auto minutes = static_cast<int64_t>(seconds / 60);
  const double rest = seconds - static_cast<double>(minutes) * 60;
  // Go prints seconds with as many decimals as needed (up to ms here), no trailing zeros.
  std::string s = fmt::format("{:.3f}", rest);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return minutes > 0 ? fmt::format("{}m{}s", minutes, s) : s + "s";
}

std::vector<std::pair<std::string, std::string>> rate_limit_headers(const RateDecision& decision) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (!decision.limited) return headers;
  const RateLimitStatus& s = decision.status;
  if (s.limits.requests_per_minute > 0) {
    headers.emplace_back("x-ratelimit-limit-requests", std::to_string(s.limits.requests_per_minute));
    headers.emplace_back("x-ratelimit-remaining-requests", std::to_string(s.remaining_requests));
    headers.emplace_back("x-ratelimit-reset-requests", go_duration(s.reset_requests_s));
  }
  if (s.limits.tokens_per_minute > 0) {
    headers.emplace_back("x-ratelimit-limit-tokens", std::to_string(s.limits.tokens_per_minute));
    headers.emplace_back("x-ratelimit-remaining-tokens", std::to_string(s.remaining_tokens));
    headers.emplace_back("x-ratelimit-reset-tokens", go_duration(s.reset_tokens_s));
  }
  return headers;
}

ApiError rate_limit_error(const RateDecision& decision, std::string_view key_name) {
  const int64_t limit = decision.exceeded == "requests" ? decision.status.limits.requests_per_minute
                                                       : decision.status.limits.tokens_per_minute;
  ApiError error{429,
                 fmt::format("Rate limit reached for key '{}' on {} per minute: limit {}. Please "
                             "try again in {}.",
                             key_name, decision.exceeded, limit, go_duration(decision.retry_after_s)),
                 decision.exceeded, "", "rate_limit_exceeded"};
  error.headers = rate_limit_headers(decision);
  error.headers.emplace_back(
      "Retry-After", std::to_string(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(decision.retry_after_s)))));
  return error;
}

double steady_now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace troupe::net
