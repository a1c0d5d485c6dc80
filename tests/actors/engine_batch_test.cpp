// The engine under load on the real model (labelled slow: Release only, not under sanitizers).
#include <gtest/gtest.h>

#include <cstdio>

#include "actors/engine/engine.hpp"
#include "tests/actors/engine_test_support.hpp"

// In the helpers' namespace (engine_test_support.hpp), which they use throughout.
namespace troupe::engine::testing {
namespace {

std::vector<std::string> questions(int count) {
  const std::vector<std::string> topics = {"the sea", "a mountain", "bread", "music", "a city",
                                           "winter", "a robot", "coffee"};
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) {
    out.push_back("Write one sentence about " + topics[i % topics.size()] + " number " +
                  std::to_string(i) + ".");
  }
  return out;
}

// Continuous batching must not change anyone's output: 32 greedy requests run together give
// exactly the tokens each gives alone (the CPU path is batch-invariant).
TEST(EngineUnderLoad, ThirtyTwoConcurrentGreedyRequestsEqualTheirSoloRuns) {
  TROUPE_REQUIRE_MODEL();
  auto engine = Engine::start(test_config());
  expect_batched_equals_solo(*engine, questions(32), 12);
  EXPECT_TRUE(wait_idle(*engine));
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

// A critical request overtakes a full batch of low-priority ones (it preempts one of them), and
// the preempted request still produces exactly its solo output.
TEST(EngineUnderLoad, CriticalRequestOvertakesLowPriorityWork) {
  TROUPE_REQUIRE_MODEL();
  EngineConfig config = test_config();
  config.scheduler.max_num_seqs = 4;
  auto engine = Engine::start(config);

  auto solo = std::make_shared<RecordingSink>();
  engine->submit(greedy_chat("Write a story about a dragon.", 48), solo);
  ASSERT_TRUE(solo->wait());

  std::vector<std::shared_ptr<RecordingSink>> low;
  for (int i = 0; i < 4; ++i) {
    GenerateRequest request = greedy_chat("Write a story about a dragon.", 48);
    request.priority = Priority::kLow;
    low.push_back(std::make_shared<RecordingSink>());
    engine->submit(std::move(request), low.back());
  }
  // Until the last low-priority request is decoding (a bound only as a failure guard).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (low.back()->num_deltas() < 2) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the low-priority requests never ran";
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }

  GenerateRequest urgent = greedy_chat("Name a color.", 4);
  urgent.priority = Priority::kCritical;
  auto critical = std::make_shared<RecordingSink>();
  engine->submit(std::move(urgent), critical);
  ASSERT_TRUE(critical->wait());
  int still_running = 0;
  for (auto& sink : low) still_running += sink->ended() ? 0 : 1;
  EXPECT_GE(still_running, 3) << "the critical request should not wait for the low ones";

  for (auto& sink : low) {
    ASSERT_TRUE(sink->wait());
    EXPECT_EQ(sink->token_ids(), solo->token_ids());  // preempted or not, same tokens
  }
  EXPECT_GE(engine->stats().num_preemptions, 1u);
  EXPECT_TRUE(wait_idle(*engine));
}

// Requests that arrive together with a long common prefix: the later ones wait while the first
// computes each shared block, then reuse it (in-flight prefix sharing), so most prompt tokens
// come from the cache, some after a 1-token remainder. Their tokens must equal what each
// request gives alone on an engine without any prefix cache.
TEST(EngineUnderLoad, SharedPrefixArrivingTogetherMatchesRunsWithoutTheCache) {
  TROUPE_REQUIRE_MODEL();
  const std::string document =
      "Saltmere is a small harbour town on a windy northern coast. Its fishermen leave before "
      "dawn, its bakers open at five, and its single lighthouse has been kept by the same family "
      "for four generations. In winter the ferry stops, the cafés close early and the town "
      "library becomes the place where everyone meets. In summer visitors arrive for the regatta, "
      "the fish market and the long evenings on the pier, and the population doubles. ";
  std::vector<std::string> prompts;
  for (const char* question : {"Who keeps the lighthouse?", "When does the ferry stop?",
                               "What happens in summer?", "Where do people meet in winter?",
                               "When do the bakers open?", "Why does the population double?"}) {
    // ~600 tokens: longer than one 512-token prefill chunk, so the first request's prefill
    // spans two steps and requests admitted meanwhile are deferred rather than recomputing it.
    std::string prompt;
    for (int i = 0; i < 7; ++i) prompt += document;
    prompts.push_back(prompt + "Question: " + question);
  }
  constexpr int32_t kMaxTokens = 10;

  std::vector<std::vector<int32_t>> together;
  {
    auto engine = Engine::start(test_config());
    std::vector<std::shared_ptr<RecordingSink>> sinks;
    for (const std::string& prompt : prompts) {
      sinks.push_back(std::make_shared<RecordingSink>());
      engine->submit(greedy_chat(prompt, kMaxTokens), sinks.back());
    }
    for (auto& sink : sinks) {
      ASSERT_TRUE(sink->wait());
      ASSERT_FALSE(sink->error()) << sink->error()->message;
      together.push_back(sink->token_ids());
    }
    // Whether a request was deferred or found the prefix cached already depends on when
    // ingress admitted it relative to the steps (the policy's deferral itself is tested in
    // scheduler_test); either way all but the first reuse the document.
    const EngineStats stats = engine->stats();
    EXPECT_GE(stats.prefix_cache_hits, prompts.size() - 1);
    std::printf("prefix deferrals: %llu\n", static_cast<unsigned long long>(stats.num_prefix_deferrals));
    EXPECT_TRUE(wait_idle(*engine));
  }
  EngineConfig no_cache = test_config();
  no_cache.scheduler.enable_prefix_caching = false;
  auto engine = Engine::start(no_cache);
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto sink = std::make_shared<RecordingSink>();
    engine->submit(greedy_chat(prompts[i], kMaxTokens), sink);
    ASSERT_TRUE(sink->wait());
    EXPECT_EQ(sink->token_ids(), together[i]) << prompts[i];
  }
}

}  // namespace
}  // namespace troupe::engine::testing
