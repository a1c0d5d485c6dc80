// Per-key rate limits (net/rate_limits.hpp) on a fake clock: the request and token buckets, their
// refill, the debt a large request leaves, reloads keeping balances, and what clients are told
// (OpenAI's x-ratelimit-* headers, the 429 and its Retry-After).
#include "net/rate_limits.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace troupe::net {
namespace {

std::map<std::string, std::string> header_map(const std::vector<std::pair<std::string, std::string>>& h) {
  return {h.begin(), h.end()};
}

TEST(RateLimits, RequestsPerMinuteRefillAtTheirRate) {
  KeyRateLimiter limiter;
  limiter.set_limits({{"alice", {3, 0}}}, 100.0);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.admit("alice", 100.0).admitted) << i;
  const RateDecision refused = limiter.admit("alice", 100.0);
  EXPECT_FALSE(refused.admitted);
  EXPECT_EQ(refused.exceeded, "requests");
  EXPECT_NEAR(refused.retry_after_s, 20.0, 1e-9);  // one request back at 3 per 60 s
  EXPECT_FALSE(limiter.admit("alice", 119.0).admitted);
  const RateDecision again = limiter.admit("alice", 120.0);
  EXPECT_TRUE(again.admitted);
  EXPECT_EQ(again.status.remaining_requests, 0);
  EXPECT_NEAR(again.status.reset_requests_s, 60.0, 1e-9);  // empty: a whole minute to fill
  // Keys without limits, and requests without a key, are always admitted, without headers.
  limiter.set_limits({{"alice", {3, 0}}, {"bob", {}}}, 120.0);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(limiter.admit("bob", 120.0).admitted);
  EXPECT_TRUE(limiter.admit("", 120.0).admitted);
  EXPECT_TRUE(rate_limit_headers(limiter.admit("bob", 120.0)).empty());
}

TEST(RateLimits, TokensAreSpentAsRequestsEndAndADebtWaitsToRefill) {
  KeyRateLimiter limiter;
  limiter.set_limits({{"alice", {0, 120}}}, 0.0);
  EXPECT_TRUE(limiter.admit("alice", 0.0).admitted);
  limiter.charge_tokens("alice", 180, 0.0);  // a large answer: 60 tokens in debt
  const RateDecision refused = limiter.admit("alice", 0.0);
  EXPECT_FALSE(refused.admitted);
  EXPECT_EQ(refused.exceeded, "tokens");
  EXPECT_EQ(refused.status.remaining_tokens, 0);
  EXPECT_NEAR(refused.retry_after_s, 30.5, 1e-9);  // to +1 token at 2 tokens a second
  EXPECT_FALSE(limiter.admit("alice", 30.0).admitted);
  EXPECT_TRUE(limiter.admit("alice", 30.5).admitted);
  const std::vector<KeyUsage> usage = limiter.usage(30.5);
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_EQ(usage[0].requests, 2);
  EXPECT_EQ(usage[0].tokens, 180);
  EXPECT_EQ(usage[0].refused, 2);
  // A durable batch item waiting its turn is not a refusal anyone saw.
  limiter.charge_tokens("alice", 1000, 30.5);
  EXPECT_FALSE(limiter.admit("alice", 30.5, /*counted=*/false).admitted);
  EXPECT_EQ(limiter.usage(30.5)[0].refused, 2);
}

TEST(RateLimits, AReloadKeepsBalancesAndStartsNewKeysFull) {
  KeyRateLimiter limiter;
  limiter.set_limits({{"alice", {10, 0}}, {"gone", {5, 0}}}, 0.0);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(limiter.admit("alice", 0.0).admitted);
  limiter.set_limits({{"alice", {20, 0}}, {"carol", {4, 0}}}, 0.0);
  const std::vector<KeyUsage> usage = limiter.usage(0.0);
  ASSERT_EQ(usage.size(), 2u);  // "gone" is forgotten
  EXPECT_EQ(usage[0].name, "alice");
  EXPECT_EQ(usage[0].status.remaining_requests, 2);  // a raised limit is no fresh minute
  EXPECT_EQ(usage[0].requests, 8);
  EXPECT_EQ(usage[1].status.remaining_requests, 4);
  limiter.set_limits({{"alice", {1, 0}}}, 0.0);  // lowered below the balance: clamped
  EXPECT_EQ(limiter.usage(0.0)[0].status.remaining_requests, 1);
}

TEST(RateLimits, ClientsAreToldAsOpenAiTellsThem) {
  KeyRateLimiter limiter;
  limiter.set_limits({{"alice", {2, 600}}}, 0.0);
  const RateDecision first = limiter.admit("alice", 0.0);
  auto headers = header_map(rate_limit_headers(first));
  EXPECT_EQ(headers["x-ratelimit-limit-requests"], "2");
  EXPECT_EQ(headers["x-ratelimit-remaining-requests"], "1");
  EXPECT_EQ(headers["x-ratelimit-reset-requests"], "30s");
  EXPECT_EQ(headers["x-ratelimit-limit-tokens"], "600");
  EXPECT_EQ(headers["x-ratelimit-remaining-tokens"], "600");
  EXPECT_EQ(headers["x-ratelimit-reset-tokens"], "0s");
  EXPECT_TRUE(limiter.admit("alice", 0.0).admitted);
  const RateDecision refused = limiter.admit("alice", 0.0);
  const ApiError error = rate_limit_error(refused, "alice");
  EXPECT_EQ(error.status, 429);
  EXPECT_EQ(error.type, "requests");
  EXPECT_EQ(error.code, "rate_limit_exceeded");
  EXPECT_NE(error.message.find("alice"), std::string::npos) << error.message;
  headers = header_map(error.headers);
  EXPECT_EQ(headers["Retry-After"], "30");
  EXPECT_EQ(headers["x-ratelimit-remaining-requests"], "0");
  EXPECT_EQ(headers["x-ratelimit-reset-requests"], "1m0s");
  EXPECT_EQ(error_response(error).headers.size(), error.headers.size());
}

TEST(RateLimits, GoDurations) {
  EXPECT_EQ(go_duration(0), "0s");
  EXPECT_EQ(go_duration(0.02), "20ms");
  EXPECT_EQ(go_duration(0.0001), "1ms");
  EXPECT_EQ(go_duration(1), "1s");
  EXPECT_EQ(go_duration(1.5), "1.5s");
  EXPECT_EQ(go_duration(360), "6m0s");
  EXPECT_EQ(go_duration(61.25), "1m1.25s");
}

}  // namespace
}  // namespace troupe::net
