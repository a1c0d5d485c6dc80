// RequestRecord (net/request_record.cpp): the one place a request's end is counted, once.
#include "net/request_record.hpp"

#include <memory>

#include <gtest/gtest.h>

namespace troupe::net {
namespace {

engine::Completion completion_with(std::string reason) {
  engine::Completion completion;
  completion.finish_reason = std::move(reason);
  completion.usage.completion_tokens = 2;
  completion.timings.time_to_first_token_ms = 5;
  return completion;
}

TEST(RequestRecord, TheFirstEndCountsAndLaterOnesAreIgnored) {
  auto metrics = std::make_shared<ServingMetrics>();
  {
    RequestRecord record(metrics, {"http", "/v1/completions", "cmpl-1", ""});
    EXPECT_FALSE(record.ended());
    EXPECT_TRUE(record.finish(completion_with("cancelled"), /*client_gone=*/true));
    EXPECT_TRUE(record.ended());
    EXPECT_FALSE(record.finish(completion_with("stop"), false));
    EXPECT_FALSE(record.fail(ApiError{500, "late", "server_error", "", "internal_error"}));
  }
  EXPECT_EQ(metrics->finished_cancelled.load(), 1u);
  EXPECT_EQ(metrics->finished_stop.load(), 0u);
  EXPECT_EQ(metrics->failed.load(), 0u);
  EXPECT_EQ(metrics->e2e_latency_s.snapshot().count, 1u);
}

// A finish spends the request's tokens (prompt + completion) from its key's tokens per minute,
// once; a refusal spends none.
TEST(RequestRecord, AFinishSpendsTheKeysTokensOnce) {
  auto metrics = std::make_shared<ServingMetrics>();
  metrics->rate_limits.set_limits({{"alice", {0, 100}}}, steady_now_s());
  engine::Completion big = completion_with("length");
  big.usage.prompt_tokens = 70;
  big.usage.completion_tokens = 40;
  {
    RequestRecord refused(metrics, {"http", "/v1/completions", "-", "", "alice"});
    refused.fail(ApiError{429, "busy", "server_error", "", "queue_full"});
  }
  EXPECT_TRUE(metrics->rate_limits.admit("alice", steady_now_s()).admitted);
  {
    RequestRecord record(metrics, {"http", "/v1/completions", "cmpl-2", "", "alice"});
    EXPECT_TRUE(record.finish(big, false));
    EXPECT_FALSE(record.finish(big, false));  // a second end spends nothing more
  }
  EXPECT_EQ(metrics->rate_limits.usage(steady_now_s()).at(0).tokens, 110);
  EXPECT_EQ(metrics->rate_limits.admit("alice", steady_now_s()).exceeded, "tokens");
}

TEST(RequestRecord, ARefusalCountsAsAFailure) {
  auto metrics = std::make_shared<ServingMetrics>();
  RequestRecord record(metrics, {"ws", "/v1/chat/ws", "c1", "ws:1"});
  EXPECT_TRUE(
      record.fail(ApiError{400, "bad", "invalid_request_error", "max_tokens", "invalid_value"}));
  EXPECT_FALSE(record.finish(completion_with("stop"), false));
  EXPECT_EQ(metrics->failed.load(), 1u);
  EXPECT_EQ(metrics->finished_stop.load(), 0u);
  EXPECT_EQ(metrics->e2e_latency_s.snapshot().count, 0u);
}

// A record dropped without an end is a bug elsewhere; the request is still counted (as failed)
// rather than lost.
TEST(RequestRecord, ARecordDroppedWithoutAnEndStillCounts) {
  auto metrics = std::make_shared<ServingMetrics>();
  { RequestRecord record(metrics, {"batch", "/v1/batch", "-", "custom_id=a"}); }
  EXPECT_EQ(metrics->failed.load(), 1u);
}

// n > 1: latencies per choice, one count for the request.
TEST(RequestRecord, ObservationsDoNotCount) {
  auto metrics = std::make_shared<ServingMetrics>();
  RequestRecord record(metrics, {"http", "/v1/completions", "cmpl-2", "n=2"});
  record.observe(completion_with("length"));
  record.observe(completion_with("stop"));
  EXPECT_EQ(metrics->e2e_latency_s.snapshot().count, 2u);
  EXPECT_TRUE(record.finish("length", engine::Usage{3, 4, 0}, false));
  EXPECT_EQ(metrics->finished_length.load(), 1u);
  EXPECT_EQ(metrics->finished_stop.load(), 0u);
}

}  // namespace
}  // namespace troupe::net
