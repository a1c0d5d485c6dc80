// Speculative decoding through the whole engine (issue 21): ingress, scheduler actor, CPU
// backend. With n-gram drafts a request's text, stop strings, max_tokens and n > 1 seeded
// choices come out exactly as without them, drafts are accepted on text that repeats, and the
// counters reach EngineStats. Skips when the model file is absent.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "actors/engine/engine.hpp"
#include "engine_test_support.hpp"

namespace troupe::engine {
namespace {

using testing::RecordingSink;
using testing::greedy_chat;
using testing::test_config;
using testing::wait_idle;

// Speculation is on by default; the reference engine decodes without drafts.
EngineConfig plain_config() {
  EngineConfig config = test_config();
  config.scheduler.speculative = {};
  return config;
}

// The step-time budget off: drafts are fitted to it, so under a loaded machine (ASan, two tests
// at once) the measured step time would drop every draft and these tests would test nothing.
EngineConfig speculative_config() {
  EngineConfig config = test_config();
  config.scheduler.max_step_ms = 0;
  config.scheduler.speculative = {.method = scheduler::SpeculativeMethod::kNgram,
                                  .num_speculative_tokens = 4,
                                  .prompt_lookup_min = 2,
                                  .prompt_lookup_max = 4};
  return config;
}

constexpr const char* kRepeat =
    "Repeat this text exactly: The keeper climbed the stairs each evening, cleaned the glass, "
    "and wrote the weather in a small book.";

struct Answer {
  std::string text;
  std::vector<int32_t> tokens;
  Completion completion;
};

Answer ask(Engine& engine, GenerateRequest request) {
  auto sink = std::make_shared<RecordingSink>();
  engine.submit(std::move(request), sink);
  EXPECT_TRUE(sink->wait());
  EXPECT_FALSE(sink->error()) << sink->error()->message;
  EXPECT_EQ(sink->calls_after_end(), 0);
  return {sink->text(), sink->token_ids(), sink->completion().value_or(Completion{})};
}

TEST(EngineSpeculative, SameAnswersWithDrafts) {
  TROUPE_REQUIRE_MODEL();
  auto plain = Engine::start(plain_config());
  auto spec = Engine::start(speculative_config());

  const Answer a = ask(*plain, greedy_chat(kRepeat, 48));
  const Answer b = ask(*spec, greedy_chat(kRepeat, 48));
  EXPECT_EQ(b.tokens, a.tokens);
  // The model copies the sentence and stops (EOS, inside a run of accepted drafts).
  EXPECT_EQ(b.completion.finish_reason, a.completion.finish_reason);
  EXPECT_EQ(b.text, a.text);
  EXPECT_EQ(b.completion.usage.completion_tokens, a.completion.usage.completion_tokens);
  const SpeculativeStats stats = spec->stats().speculative;
  EXPECT_GT(stats.num_accepted_tokens, 0u);
  EXPECT_LE(stats.num_accepted_tokens, stats.num_draft_tokens);
  EXPECT_EQ(plain->stats().speculative.num_drafts, 0u);

  // max_tokens that ends inside an accepted run: exactly that many, "length".
  ASSERT_GT(a.tokens.size(), 15u);
  const Answer cut = ask(*spec, greedy_chat(kRepeat, 15));
  EXPECT_EQ(cut.completion.usage.completion_tokens, 15);
  EXPECT_EQ(cut.completion.finish_reason, "length");
  EXPECT_EQ(cut.tokens, std::vector<int32_t>(a.tokens.begin(), a.tokens.begin() + 15));

  // A stop string in the middle of the answer: the same cut with and without drafts.
  const std::string stop = "the glass";
  ASSERT_NE(a.text.find(stop), std::string::npos) << a.text;
  GenerateRequest with_stop = greedy_chat(kRepeat, 48);
  with_stop.stop.stop_strings = {stop};
  const Answer p = ask(*plain, with_stop);
  const Answer s = ask(*spec, with_stop);
  EXPECT_EQ(s.text, a.text.substr(0, a.text.find(stop)));
  EXPECT_EQ(s.text, p.text);
  EXPECT_EQ(s.completion.finish_reason, "stop");
  EXPECT_EQ(s.completion.usage.completion_tokens, p.completion.usage.completion_tokens);

  // n = 2 seeded choices at temperature 0.8.
  GenerateRequest sampled = greedy_chat(kRepeat, 40);
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.seed = 7;
  sampled.n = 2;
  auto plain_sink = std::make_shared<RecordingSink>();
  auto spec_sink = std::make_shared<RecordingSink>();
  plain->submit(sampled, plain_sink);
  spec->submit(sampled, spec_sink);
  ASSERT_TRUE(plain_sink->wait());
  ASSERT_TRUE(spec_sink->wait());
  for (int32_t choice : {0, 1}) {
    EXPECT_FALSE(spec_sink->choice_token_ids(choice).empty());
    EXPECT_EQ(spec_sink->choice_token_ids(choice), plain_sink->choice_token_ids(choice)) << choice;
  }
  EXPECT_TRUE(wait_idle(*spec));
  EXPECT_TRUE(wait_idle(*plain));
}

}  // namespace
}  // namespace troupe::engine
