// Prompt outputs in the scheduling policy (issue 37): which positions a step scores or returns
// hidden rows for, what they are scored against, prompt-only sequences (embeddings, echo with
// max_tokens 0), and that neither a chunked prefill nor a preemption reports a position twice.
// The fake model's prompt outputs are made up here (a score's logprob is minus its position, a
// hidden row holds its position): what is checked is the bookkeeping, not the numbers.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "actors/scheduler/scheduler.hpp"
#include "scheduler_harness.hpp"

namespace troupe::scheduler {
namespace {

using testing::SchedulerHarness;
using testing::small_config;
using testing::token_range;

constexpr int32_t kWidth = 3;  // the fake hidden rows' width

// The fake backend's prompt outputs for a planned batch: scores name their target token (so the
// test sees what the scheduler asked) with logprob -position; hidden rows are (p, p, p).
void add_fake_prompt_outputs(const gpu::StepBatch& batch, gpu::StepResult& result) {
  for (const gpu::SequenceSlice& s : batch.seqs) {
    if (s.num_scored > 0) {
      gpu::PromptScores scores{s.seq_id, s.scored_begin, {}};
      for (int32_t i = 0; i < s.num_scored; ++i) {
        scores.tokens.push_back({batch.score_targets[static_cast<size_t>(s.score_offset + i)],
                                 -static_cast<float>(s.scored_begin + i), 1, {}});
      }
      result.scores.push_back(std::move(scores));
    }
    if (s.num_hidden > 0) {
      gpu::HiddenRows rows{s.seq_id, s.hidden_begin, kWidth, {}};
      for (int32_t i = 0; i < s.num_hidden; ++i) {
        for (int32_t j = 0; j < kWidth; ++j) rows.values.push_back(static_cast<float>(s.hidden_begin + i));
      }
      result.hidden.push_back(std::move(rows));
    }
  }
}

struct Collected {
  std::map<RequestId, std::vector<int32_t>> scored_targets;  // in report order
  std::map<RequestId, std::vector<int32_t>> scored_positions;
  std::map<RequestId, std::vector<float>> embeddings;
  std::vector<gpu::SequenceSlice> slices;  // every slice planned
};

// Runs the harness to idle, the fake model's prompt outputs added to each step.
void run(SchedulerHarness& h, Collected& c, int max_steps = 1000) {
  for (int step = 0; step < max_steps && h.scheduler.has_unfinished_requests(); ++step) {
    StepPlan plan = h.scheduler.schedule();
    if (plan.empty()) break;
    c.slices.insert(c.slices.end(), plan.batch.seqs.begin(), plan.batch.seqs.end());
    gpu::StepResult result = h.model.run(plan.batch);
    add_fake_prompt_outputs(plan.batch, result);
    const StepUpdate update = h.scheduler.on_step_complete(result);
    for (const PromptLogprobs& p : update.prompt_logprobs) {
      for (size_t i = 0; i < p.tokens.size(); ++i) {
        c.scored_targets[p.request_id].push_back(p.tokens[i].token_id);
        c.scored_positions[p.request_id].push_back(p.first_position + static_cast<int32_t>(i));
      }
    }
    for (const Embedding& e : update.embeddings) c.embeddings[e.request_id] = e.values;
    h.record(update);
    h.check();
  }
}

NewRequest request(RequestId id, std::vector<int32_t> prompt, int32_t max_tokens) {
  NewRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  return r;
}

std::vector<int32_t> iota(int32_t from, int32_t to) {
  std::vector<int32_t> v;
  for (int32_t p = from; p < to; ++p) v.push_back(p);
  return v;
}

TEST(SchedulerPromptOutputs, EveryPromptTokenAfterTheFirstIsScoredOnceAgainstItself) {
  SchedulerHarness h(small_config());  // chunks of 32: the 80-token prompt takes three steps
  const std::vector<int32_t> prompt = token_range(80, 300);
  NewRequest r = request(1, prompt, 4);
  r.prompt_logprobs = 2;
  ASSERT_EQ(h.scheduler.add_request(r), AddResult::kAccepted);
  Collected c;
  run(h, c);
  // Position p scores token p + 1; the last prompt position predicts a generated token instead.
  EXPECT_EQ(c.scored_positions[1], iota(0, 79));
  EXPECT_EQ(c.scored_targets[1], std::vector<int32_t>(prompt.begin() + 1, prompt.end()));
  EXPECT_EQ(h.outputs[1].size(), 4u);  // and it generates as usual
  for (const gpu::SequenceSlice& s : c.slices) {
    if (s.num_scored > 0) EXPECT_EQ(s.score_top_n, 2);
  }
}

TEST(SchedulerPromptOutputs, ScoringTakesNoCachedPrefixAndOthersStillDo) {
  SchedulerHarness h(small_config());
  const std::vector<int32_t> prompt = token_range(64, 300);
  h.add(1, prompt, 2);
  h.run_until_idle();
  NewRequest scored = request(2, prompt, 2);
  scored.prompt_logprobs = 0;
  ASSERT_EQ(h.scheduler.add_request(scored), AddResult::kAccepted);
  Collected c;
  run(h, c);
  EXPECT_EQ(c.scored_positions[2], iota(0, 63));  // every position, though 48 were cached
  EXPECT_EQ(h.scheduler.find(2), nullptr);
  const auto before = h.scheduler.stats().kv.prefix.num_queries;
  h.add(3, prompt, 2);
  h.run_until_idle();
  EXPECT_EQ(h.scheduler.stats().kv.prefix.num_queries, before + 1);
  EXPECT_GT(h.scheduler.stats().kv.prefix.num_hit_tokens, 0u);
}

TEST(SchedulerPromptOutputs, APromptOnlySequenceFinishesWithoutSampling) {
  SchedulerHarness h(small_config());
  NewRequest r = request(1, token_range(40, 300), 0);  // max_tokens 0: echo, scored only
  r.prompt_logprobs = 1;
  r.prompt_only = true;
  ASSERT_EQ(h.scheduler.add_request(r), AddResult::kAccepted);
  Collected c;
  run(h, c);
  EXPECT_EQ(h.reasons[1], FinishReason::kPromptDone);
  EXPECT_TRUE(h.outputs[1].empty());
  EXPECT_EQ(c.scored_positions[1], iota(0, 39));
  for (const gpu::SequenceSlice& s : c.slices) EXPECT_FALSE(s.sample);
  EXPECT_EQ(h.scheduler.kv_cache().stats().num_referenced, 0);
  // Without prompt_only, max_tokens 0 is still refused.
  EXPECT_EQ(h.scheduler.add_request(request(2, token_range(8, 300), 0)), AddResult::kInvalidMaxTokens);
}

TEST(SchedulerPromptOutputs, APromptOnlySequenceMayFillTheContextAndItsBlocks) {
  SchedulerConfig config = small_config();
  config.max_model_len = 33;  // 33 tokens: the 33rd needs a third block
  config.num_blocks = 3;
  SchedulerHarness h(config);
  NewRequest r = request(1, token_range(33, 300), 0);
  r.prompt_only = true;
  r.pooling = model::Pooling::kLast;
  ASSERT_EQ(h.scheduler.add_request(r), AddResult::kAccepted);
  Collected c;
  run(h, c);
  EXPECT_EQ(h.reasons[1], FinishReason::kPromptDone);
  ASSERT_EQ(c.embeddings[1].size(), static_cast<size_t>(kWidth));
  EXPECT_EQ(c.embeddings[1][0], 32.0f);
  config.num_blocks = 2;
  SchedulerHarness small(config);
  r.request_id = 2;
  EXPECT_EQ(small.scheduler.add_request(r), AddResult::kNeverFits);
}

TEST(SchedulerPromptOutputs, PoolingCollectsTheRowsItNamesAcrossChunks) {
  SchedulerHarness h(small_config());
  const std::vector<int32_t> prompt = token_range(70, 300);  // chunks 32 + 32 + 6
  std::map<RequestId, model::Pooling> pooling{
      {1, model::Pooling::kMean}, {2, model::Pooling::kLast}, {3, model::Pooling::kCls}};
  for (const auto& [id, p] : pooling) {
    NewRequest r = request(id, prompt, 0);
    r.prompt_only = true;
    r.pooling = p;
    ASSERT_EQ(h.scheduler.add_request(r), AddResult::kAccepted);
  }
  Collected c;
  run(h, c);
  // Rows hold their position: the mean of 0..69 is 34.5; last 69; cls 0.
  EXPECT_EQ(c.embeddings[1], std::vector<float>(kWidth, 34.5f));
  EXPECT_EQ(c.embeddings[2], std::vector<float>(kWidth, 69.0f));
  EXPECT_EQ(c.embeddings[3], std::vector<float>(kWidth, 0.0f));
  int32_t rows_of_last = 0;
  for (const gpu::SequenceSlice& s : c.slices) {
    if (s.seq_id == 2) rows_of_last += s.num_hidden;
  }
  EXPECT_EQ(rows_of_last, 1);  // only the row it needs crosses from the backend
}

TEST(SchedulerPromptOutputs, AnEmbeddingNeverEntersThePrefixCache) {
  SchedulerHarness h(small_config());
  const std::vector<int32_t> prompt = token_range(64, 300);
  NewRequest r = request(1, prompt, 0);
  r.prompt_only = true;
  r.pooling = model::Pooling::kMean;
  ASSERT_EQ(h.scheduler.add_request(r), AddResult::kAccepted);
  Collected c;
  run(h, c);
  EXPECT_EQ(h.scheduler.kv_cache().stats().num_cached_blocks, 0);
  h.add(2, prompt, 2);
  const auto plan = h.step();
  EXPECT_EQ(plan->batch.positions.front(), 0);  // nothing to reuse
}

TEST(SchedulerPromptOutputs, APreemptedSequenceReportsNoPositionTwice) {
  SchedulerConfig config = small_config();
  config.num_blocks = 10;  // three sequences of 100 tokens do not fit: preemption by recompute
  SchedulerHarness h(config);
  for (RequestId id = 1; id <= 3; ++id) {
    NewRequest r = request(id, token_range(40, 100 * static_cast<int32_t>(id)), 60);
    r.prompt_logprobs = 0;
    ASSERT_EQ(h.scheduler.add_request(r), AddResult::kAccepted);
    h.requests[id] = r;
  }
  Collected c;
  run(h, c);
  ASSERT_GT(h.scheduler.stats().num_preemptions, 0u);
  for (RequestId id = 1; id <= 3; ++id) {
    EXPECT_EQ(c.scored_positions[id], iota(0, 39)) << id;
    EXPECT_EQ(h.outputs[id], h.expected_output(id)) << id;
  }
}

}  // namespace
}  // namespace troupe::scheduler
