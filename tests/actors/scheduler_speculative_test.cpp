// Speculative decoding in the scheduler policy (issue 21), with the fake model: verify spans of
// n-gram drafts produce exactly the tokens of plain decoding; rejected drafts give back their
// KV positions and blocks and never reach the prefix cache; stops inside an accepted run cut
// it; preemption, the token budget and the adaptive rule hold.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "actors/scheduler/ngram_proposer.hpp"
#include "actors/scheduler/scheduler.hpp"
#include "scheduler_harness.hpp"

namespace troupe::scheduler {
namespace {

using testing::SchedulerHarness;
using testing::small_config;

constexpr int32_t kPeriod = 12;  // the fake text repeats every 12 tokens (three times in four)

SchedulerConfig speculative_config(int32_t k = 4) {
  SchedulerConfig config = small_config();
  config.speculative = {.method = SpeculativeMethod::kNgram,
                        .num_speculative_tokens = k,
                        .prompt_lookup_min = 2,
                        .prompt_lookup_max = 4};
  return config;
}

// A prompt whose last kPeriod tokens the fake model starts copying.
std::vector<int32_t> repeating_prompt(int32_t seed, int32_t length = 30) {
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < length; ++i) prompt.push_back(10 + (seed * 31 + i * 7) % 200);
  return prompt;
}

// Every running sequence holds exactly the blocks its computed tokens need: nothing a rejected
// draft used is kept past its step.
void expect_no_draft_blocks_held(const Scheduler& scheduler, const std::vector<RequestId>& ids) {
  const int32_t bs = scheduler.config().block_size;
  for (RequestId id : ids) {
    const Sequence* seq = scheduler.find(id);
    if (seq == nullptr || seq->state != SequenceState::kRunning) continue;
    EXPECT_LE(seq->num_computed_tokens, seq->num_tokens()) << "request " << id;
    EXPECT_EQ(static_cast<int32_t>(seq->kv.blocks.size()),
              kv_cache::KvCacheManager::blocks_for_tokens(seq->num_computed_tokens, bs))
        << "request " << id << " holds blocks only rejected drafts needed";
  }
}

TEST(SchedulerSpeculative, ConfigIsValidated) {
  EXPECT_FALSE(validate(speculative_config(4)).has_value());
  EXPECT_TRUE(validate(speculative_config(0)).has_value());
  EXPECT_TRUE(validate(speculative_config(kMaxSpeculativeTokens + 1)).has_value());
  SchedulerConfig config = speculative_config(4);
  config.speculative.prompt_lookup_min = 0;
  EXPECT_TRUE(validate(config).has_value());
  config.speculative.prompt_lookup_min = 5;  // above max (4)
  EXPECT_TRUE(validate(config).has_value());
  EXPECT_THROW(Scheduler{config}, std::invalid_argument);
  config.speculative = {};  // "none": nothing else is looked at
  EXPECT_FALSE(validate(config).has_value());
}

TEST(SchedulerSpeculative, SameTokensAsPlainDecodingInFewerSteps) {
  SchedulerHarness plain(small_config(), 1ULL << 62, kPeriod);
  SchedulerHarness spec(speculative_config(), 1ULL << 62, kPeriod);
  for (SchedulerHarness* h : {&plain, &spec}) {
    for (RequestId id = 1; id <= 4; ++id) {
      ASSERT_EQ(h->add(id, repeating_prompt(static_cast<int32_t>(id)), 80, Priority::kNormal, true),
                AddResult::kAccepted);
    }
  }
  const int plain_steps = plain.run_until_idle();
  std::vector<RequestId> ids = {1, 2, 3, 4};
  int spec_steps = 0;
  bool saw_verify_span = false;
  while (spec.scheduler.has_unfinished_requests()) {
    const auto plan = spec.step();
    ASSERT_TRUE(plan.has_value());
    for (const auto& slice : plan->batch.seqs) {
      if (slice.num_draft_tokens == 0) continue;
      saw_verify_span = true;
      EXPECT_TRUE(slice.sample);
      EXPECT_LE(slice.num_draft_tokens, 4);
      EXPECT_EQ(slice.num_tokens, 1 + slice.num_draft_tokens);
    }
    expect_no_draft_blocks_held(spec.scheduler, ids);
    ++spec_steps;
  }
  EXPECT_TRUE(saw_verify_span);
  for (RequestId id : ids) {
    EXPECT_EQ(spec.outputs[id], spec.expected_output(id)) << "request " << id;
    EXPECT_EQ(spec.outputs[id], plain.outputs[id]) << "request " << id;
    EXPECT_EQ(spec.reasons[id], FinishReason::kMaxTokens);
  }
  const SchedulerStats stats = spec.scheduler.stats();
  EXPECT_GT(stats.num_spec_drafts, 0u);
  EXPECT_GT(stats.num_spec_accepted_tokens, 0u);
  EXPECT_LE(stats.num_spec_accepted_tokens, stats.num_spec_draft_tokens);
  EXPECT_EQ(stats.num_generated_tokens, plain.scheduler.stats().num_generated_tokens);
  EXPECT_EQ(plain.scheduler.stats().num_spec_drafts, 0u);
  EXPECT_LT(spec_steps, plain_steps);
  // Every block is back in the pool (free or cached) once everything finished.
  EXPECT_EQ(spec.scheduler.kv_cache().stats().num_referenced, 0);
}

// Rejected drafts wrote KV into the blocks of positions the sequence had not reached: those
// positions must be recomputed, never served from the prefix cache. A later request whose
// prompt is the first one's whole text reads every cached block back (the fake model reads its
// context through the KV), so a block cached with a rejected draft's KV changes its output.
TEST(SchedulerSpeculative, RejectedDraftsNeverReachThePrefixCache) {
  SchedulerHarness h(speculative_config(6), 1ULL << 62, kPeriod);
  const std::vector<int32_t> prompt = repeating_prompt(5, 40);
  ASSERT_EQ(h.add(1, prompt, 90, Priority::kNormal, true), AddResult::kAccepted);
  h.run_until_idle();
  ASSERT_EQ(h.outputs[1], h.expected_output(1));
  const SchedulerStats first = h.scheduler.stats();
  ASSERT_GT(first.num_spec_draft_tokens, first.num_spec_accepted_tokens) << "no draft was rejected";
  std::vector<int32_t> text = prompt;
  text.insert(text.end(), h.outputs[1].begin(), h.outputs[1].end());
  ASSERT_EQ(h.add(2, text, 20, Priority::kNormal, true), AddResult::kAccepted);
  h.run_until_idle();
  const Sequence* none = h.scheduler.find(2);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(h.outputs[2], h.expected_output(2));
  EXPECT_GT(h.scheduler.kv_cache().stats().prefix.num_hits, 0u);
}

// The fake text holds EOS (2) and a stop id (7): the model copies them, and the drafts propose
// them with tokens after them. The sequence ends at the stop, the rest of the run is dropped,
// and max_tokens is never exceeded.
TEST(SchedulerSpeculative, StopsInsideAnAcceptedRunEndThere) {
  SchedulerHarness h(speculative_config(8), 1ULL << 62, kPeriod);
  std::vector<int32_t> with_eos = repeating_prompt(1, 30);
  with_eos[25] = 2;
  ASSERT_EQ(h.add(1, with_eos, 200), AddResult::kAccepted);
  NewRequest stop_id;
  stop_id.request_id = 2;
  stop_id.prompt_token_ids = repeating_prompt(2, 30);
  stop_id.prompt_token_ids[27] = 7;
  stop_id.stop.max_tokens = 200;
  stop_id.stop.stop_token_ids = {7};
  ASSERT_EQ(h.scheduler.add_request(stop_id), AddResult::kAccepted);
  h.requests[2] = stop_id;
  for (RequestId id = 3; id <= 6; ++id) {  // lengths that end inside a verify span
    ASSERT_EQ(h.add(id, repeating_prompt(static_cast<int32_t>(id)), 7 + 3 * static_cast<int32_t>(id),
                    Priority::kNormal, true),
              AddResult::kAccepted);
  }
  h.run_until_idle();
  EXPECT_EQ(h.reasons[1], FinishReason::kEos);
  EXPECT_EQ(h.reasons[2], FinishReason::kStopToken);
  for (RequestId id = 1; id <= 6; ++id) {
    EXPECT_EQ(h.outputs[id], h.expected_output(id)) << "request " << id;
    EXPECT_LE(static_cast<int32_t>(h.outputs[id].size()), h.requests[id].stop.max_tokens);
  }
  for (RequestId id = 3; id <= 6; ++id) EXPECT_EQ(h.reasons[id], FinishReason::kMaxTokens);
  EXPECT_GT(h.scheduler.stats().num_spec_accepted_tokens, 0u);
}

// max_model_len bounds drafts too: a sequence never computes past it.
TEST(SchedulerSpeculative, DraftsStopAtTheContextLength) {
  SchedulerConfig config = speculative_config(8);
  config.max_model_len = 70;
  SchedulerHarness h(config, 1ULL << 62, kPeriod);
  ASSERT_EQ(h.add(1, repeating_prompt(3, 30), 500, Priority::kNormal, true), AddResult::kAccepted);
  while (h.scheduler.has_unfinished_requests()) {
    const auto plan = h.step();
    ASSERT_TRUE(plan.has_value());
    for (const auto& slice : plan->batch.seqs) EXPECT_LE(slice.context_len, 70);
  }
  EXPECT_EQ(h.reasons[1], FinishReason::kMaxModelLen);
  EXPECT_EQ(h.outputs[1], h.expected_output(1));
}

// A pool too small for everyone: sequences with drafts are preempted and recomputed, and the
// output is still that of plain decoding.
TEST(SchedulerSpeculative, PreemptionWithDrafts) {
  SchedulerConfig config = speculative_config(6);
  config.num_blocks = 14;
  SchedulerHarness h(config, 1ULL << 62, kPeriod);
  std::vector<RequestId> ids;
  for (RequestId id = 1; id <= 4; ++id) {
    ASSERT_EQ(h.add(id, repeating_prompt(static_cast<int32_t>(id), 24), 60, Priority::kNormal, true),
              AddResult::kAccepted);
    ids.push_back(id);
  }
  int steps = 0;
  while (h.scheduler.has_unfinished_requests() && steps < 5000) {
    ASSERT_TRUE(h.step().has_value());
    expect_no_draft_blocks_held(h.scheduler, ids);
    ++steps;
  }
  for (RequestId id : ids) EXPECT_EQ(h.outputs[id], h.expected_output(id)) << "request " << id;
  EXPECT_GT(h.scheduler.stats().num_preemptions, 0u);
  EXPECT_GT(h.scheduler.stats().num_spec_accepted_tokens, 0u);
}

// Drafts take only what the token budget leaves after every decode.
TEST(SchedulerSpeculative, DraftsFitTheTokenBudget) {
  SchedulerConfig config = speculative_config(8);
  config.max_num_batched_tokens = 10;
  config.max_num_seqs = 4;
  SchedulerHarness h(config, 1ULL << 62, kPeriod);
  for (RequestId id = 1; id <= 4; ++id) {
    ASSERT_EQ(h.add(id, repeating_prompt(static_cast<int32_t>(id), 20), 40, Priority::kNormal, true),
              AddResult::kAccepted);
  }
  bool drafted = false;
  while (h.scheduler.has_unfinished_requests()) {
    const auto plan = h.step();
    ASSERT_TRUE(plan.has_value());
    EXPECT_LE(plan->batch.num_tokens(), 10);
    for (const auto& slice : plan->batch.seqs) drafted |= slice.num_draft_tokens > 0;
  }
  EXPECT_TRUE(drafted);
  for (RequestId id = 1; id <= 4; ++id) EXPECT_EQ(h.outputs[id], h.expected_output(id));
}

// Request 1, a stream whose text repeats (drafts get accepted), on a machine where a step costs
// 5 ms plus 1 ms per token.
void start_stream_on_linear_machine(SchedulerHarness& h, int32_t max_tokens) {
  h.scheduler.set_step_cost_model({.fixed_ms = 5, .per_token_ms = 1, .usable = true});
  ASSERT_EQ(h.add(1, repeating_prompt(1, 30), max_tokens, Priority::kNormal, true),
            AddResult::kAccepted);
}

// Under the step-time budget drafts are cut to what the predicted time allows.
TEST(SchedulerSpeculative, DraftsFitTheStepTimeBudget) {
  SchedulerConfig config = speculative_config(8);
  config.max_step_ms = 10;
  SchedulerHarness h(config, 1ULL << 62, kPeriod);
  start_stream_on_linear_machine(h, 60);  // a decode alone: 6 ms, so at most 4 drafts fit
  int32_t most = 0;
  while (h.scheduler.has_unfinished_requests()) {
    const auto plan = h.step();
    ASSERT_TRUE(plan.has_value());
    if (plan->batch.seqs.front().num_tokens == 1 + plan->batch.seqs.front().num_draft_tokens) {
      most = std::max(most, plan->batch.seqs.front().num_draft_tokens);
      EXPECT_LE(plan->predicted_ms, 10.0 + 1e-9);
    }
  }
  EXPECT_EQ(most, 4);
  EXPECT_EQ(h.outputs[1], h.expected_output(1));
}

// vLLM's disable_by_batch_size: no drafts in a step that decodes more sequences than it.
TEST(SchedulerSpeculative, LargeBatchesDecodeWithoutDrafts) {
  SchedulerConfig config = speculative_config(4);
  config.speculative.disable_by_batch_size = 2;
  SchedulerHarness h(config, 1ULL << 62, kPeriod);
  for (RequestId id = 1; id <= 3; ++id) {
    ASSERT_EQ(h.add(id, repeating_prompt(static_cast<int32_t>(id)), 20 * static_cast<int32_t>(id),
                    Priority::kNormal, true),
              AddResult::kAccepted);
  }
  bool drafted_with_two = false;
  while (h.scheduler.has_unfinished_requests()) {
    const auto plan = h.step();
    ASSERT_TRUE(plan.has_value());
    int32_t drafts = 0;
    for (const auto& slice : plan->batch.seqs) drafts += slice.num_draft_tokens;
    if (plan->batch.seqs.size() > 2) {
      EXPECT_EQ(drafts, 0);
    }
    if (plan->batch.seqs.size() <= 2 && drafts > 0) drafted_with_two = true;
  }
  EXPECT_TRUE(drafted_with_two);  // once the first request finished
  for (RequestId id = 1; id <= 3; ++id) EXPECT_EQ(h.outputs[id], h.expected_output(id));
}

// With the step-time budget on, drafts spend only time no prompt needs: none in a step while a
// prompt prefills; once it is done, the stream drafts again.
TEST(SchedulerSpeculative, NoDraftsWhileAPromptPrefills) {
  SchedulerConfig config = speculative_config(4);
  config.max_step_ms = 100;
  SchedulerHarness h(config, 1ULL << 62, kPeriod);
  start_stream_on_linear_machine(h, 200);  // 1 + 4 drafts + a 32-token chunk: far under 100 ms
  bool drafted_before = false;
  while (!drafted_before) {
    const auto plan = h.step();
    ASSERT_TRUE(plan.has_value());
    drafted_before = plan->batch.seqs.front().num_draft_tokens > 0;
  }
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 200; ++i) prompt.push_back(300 + i);
  ASSERT_EQ(h.add(2, prompt, 4), AddResult::kAccepted);
  int32_t prefill_steps = 0;
  bool drafted_after = false;
  while (h.scheduler.has_unfinished_requests() && !drafted_after) {
    const auto plan = h.step();
    ASSERT_TRUE(plan.has_value());
    const auto* stream = testing::slice_of(*plan, 1);
    ASSERT_NE(stream, nullptr);
    const auto* prompt_slice = testing::slice_of(*plan, 2);
    if (prompt_slice != nullptr && prompt_slice->num_tokens > 1) {
      ++prefill_steps;
      EXPECT_EQ(stream->num_draft_tokens, 0) << "step " << plan->batch.step_id;
    } else {
      drafted_after = stream->num_draft_tokens > 0;
    }
  }
  EXPECT_GT(prefill_steps, 1);
  EXPECT_TRUE(drafted_after);
}

// Request 1: `length` prompt tokens repeating with `period` (prompt lookup always proposes).
NewRequest periodic_request(int32_t period, int32_t length, int32_t max_tokens) {
  NewRequest request;
  request.request_id = 1;
  for (int32_t i = 0; i < length; ++i) request.prompt_token_ids.push_back(10 + i % period);
  request.stop.max_tokens = max_tokens;
  request.stop.ignore_eos = true;
  return request;
}

// One step of request 1 with a hand-driven "model": answer(batch, slice, text, tokens) appends
// the step's sampled tokens, `text` being the request's tokens before the step.
template <typename Answer>
void hand_step(Scheduler& scheduler, Answer answer) {
  const std::vector<int32_t> text = scheduler.find(1)->token_ids;
  StepPlan plan = scheduler.schedule();
  ASSERT_FALSE(plan.empty());
  gpu::StepResult result;
  result.step_id = plan.batch.step_id;
  answer(plan.batch, plan.batch.seqs.front(), text, result.tokens);
  scheduler.on_step_complete(result);
  ASSERT_FALSE(scheduler.check_invariants().has_value());
}

// The drafts of a verify span.
std::vector<int32_t> drafts_of(const gpu::StepBatch& batch, const gpu::SequenceSlice& slice) {
  const auto first = batch.token_ids.begin() + (slice.num_tokens - slice.num_draft_tokens);
  return {first, first + slice.num_draft_tokens};
}

// Drafts that keep failing stop being made for a while (the adaptive rule). A hand-driven
// "model": plain decode steps copy the token three back (the text stays periodic, so prompt
// lookup keeps proposing), and every verify span rejects its first draft.
TEST(SchedulerSpeculative, LowAcceptancePausesDrafting) {
  Scheduler scheduler(speculative_config(4));
  ASSERT_EQ(scheduler.add_request(periodic_request(3, 40, 400)), AddResult::kAccepted);
  int verify_spans = 0;
  int paused_steps_with_a_proposal = 0;
  std::vector<int32_t> proposal;
  for (int step = 0; step < 300 && scheduler.has_unfinished_requests(); ++step) {
    const bool paused = scheduler.find(1)->draft_pause_steps > 0;
    ASSERT_NO_FATAL_FAILURE(hand_step(scheduler, [&](const gpu::StepBatch& batch,
                                                     const gpu::SequenceSlice& slice,
                                                     const std::vector<int32_t>& text,
                                                     std::vector<gpu::SampledToken>& tokens) {
      if (slice.num_draft_tokens > 0) {
        ++verify_spans;
        EXPECT_FALSE(paused) << "drafted while paused, step " << step;
        tokens.push_back({1, drafts_of(batch, slice).front() + 1000, 0.0f, {}});
      } else {
        tokens.push_back({1, text[text.size() - 3], 0.0f, {}});
        propose_ngram(text, {2, 4, 4}, proposal);
        if (paused && !proposal.empty()) ++paused_steps_with_a_proposal;
      }
    }));
  }
  const SchedulerStats stats = scheduler.stats();
  EXPECT_EQ(stats.num_spec_accepted_tokens, 0u);
  EXPECT_GE(verify_spans, 3);
  // Paused for whole stretches while lookup had something to propose, and tried again after.
  EXPECT_GE(paused_steps_with_a_proposal, 16);
  EXPECT_LT(verify_spans, 300 / 4);
}

// The length part of the adaptive rule: a rejection shortens the next span by one draft, a
// wholly accepted span lets the next carry two more (up to k). Hand-driven "model": plain
// decode steps copy the token six back (the text stays periodic, so prompt lookup always has
// k tokens to propose); the script below decides each verify's fate.
TEST(SchedulerSpeculative, DraftLengthFollowsAcceptance) {
  constexpr size_t kCopyBack = 6;
  Scheduler scheduler(speculative_config(4));
  ASSERT_EQ(scheduler.add_request(periodic_request(kCopyBack, 48, 200)), AddResult::kAccepted);
  const std::vector<bool> accept_all = {false, false, true, true};
  std::vector<int32_t> span_drafts;
  for (int step = 0; step < 200 && span_drafts.size() < accept_all.size(); ++step) {
    ASSERT_NO_FATAL_FAILURE(hand_step(scheduler, [&](const gpu::StepBatch& batch,
                                                     const gpu::SequenceSlice& slice,
                                                     std::vector<int32_t> text,
                                                     std::vector<gpu::SampledToken>& tokens) {
      if (slice.num_draft_tokens > 0) {
        const std::vector<int32_t> drafts = drafts_of(batch, slice);
        if (accept_all[span_drafts.size()]) {
          for (int32_t draft : drafts) {
            tokens.push_back({1, draft, 0.0f, {}});
            text.push_back(draft);
          }
          tokens.push_back({1, text[text.size() - kCopyBack], 0.0f, {}});
        } else {
          tokens.push_back({1, drafts.front() + 1000, 0.0f, {}});
        }
        span_drafts.push_back(slice.num_draft_tokens);
      } else if (slice.sample) {
        tokens.push_back({1, text[text.size() - kCopyBack], 0.0f, {}});
      }
    }));
  }
  // k, then one fewer after each rejection, then two more after the accepted span (capped at k).
  EXPECT_EQ(span_drafts, (std::vector<int32_t>{4, 3, 2, 4}));
}

}  // namespace
}  // namespace troupe::scheduler
