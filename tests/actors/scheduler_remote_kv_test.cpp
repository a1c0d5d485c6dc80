// Disaggregated prefill/decode across servers, policy side (scheduler_remote_kv.cpp,
// scheduler_transfer.cpp, retire() in scheduler.cpp). The prefill side keeps a finished
// hold_kv_when_finished request's KV held for a decode server; the decode side admits a request
// whose prompt KV is remote, orders the pull, and decodes once kv_resident() says the blocks
// landed, or computes the prompt itself when they did not.
//
// FakeStepModel is a fake forward pass (scheduler tests only; the server runs a real model). A
// test "pulls" by copying blocks between the prefill and decode harnesses' fake KV stores as
// the KvPullOrder says; the fake reads every context back through the block table, so a pull
// order that maps the wrong blocks, or a decode span at the wrong position, changes the output
// compared with reference_output().
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "actors/scheduler/scheduler.hpp"
#include "remote_kv_test_support.hpp"
#include "scheduler_harness.hpp"

namespace troupe::scheduler {
namespace {

using kv_cache::KvCacheManager;
using testing::add_remote;
using testing::complete;
using testing::FakeStepModel;
using testing::ids_in;
using testing::prefill_and_hold;
using testing::pull;
using testing::remote_request;
using testing::run_until_idle;
using testing::SchedulerHarness;
using testing::slice_of;
using testing::source_of;
using testing::take_work;
using testing::token_of;
using testing::token_range;

constexpr int32_t kBlockSize = 16;
constexpr int32_t kNumBlocks = 64;
constexpr int32_t kEosTokenId = 2;
constexpr int32_t kPromptLen = 50;  // 4 blocks: three full, one holding 2 tokens

// Large enough that a 51-token prefill runs in one span.
SchedulerConfig pd_config() {
  SchedulerConfig config = testing::small_config();
  config.max_num_batched_tokens = 128;
  config.chunked_prefill_size = 0;
  config.block_size = kBlockSize;
  config.num_blocks = kNumBlocks;
  config.eos_token_ids = {kEosTokenId};
  return config;
}

// Request 1's pull done and reported resident on the decode side, then the prefill side's hold
// released, as the two kv-cache actors would.
void pull_and_release(SchedulerHarness& decode, SchedulerHarness& prefill,
                      const KvPullOrder& order) {
  pull(decode, prefill, order);
  decode.scheduler.kv_resident(1, /*ok=*/true);
  ASSERT_INVARIANTS(decode);
  EXPECT_TRUE(prefill.scheduler.release_transferred(1));
}

// `update` carries request `id`'s n-th generated token (1-based), the one of its reference output.
void expect_nth_token(const StepUpdate& update, const SchedulerHarness& h, RequestId id,
                      int32_t n) {
  const GeneratedToken* token = token_of(update, id);
  ASSERT_NE(token, nullptr);
  EXPECT_EQ(token->num_generated_tokens, n);
  EXPECT_EQ(token->token_id, h.expected_output(id)[static_cast<size_t>(n - 1)]);
}

// A source no prefill harness backs: for cases that never read the pulled KV.
RemoteKvSource made_up_source(int32_t num_tokens, int32_t num_blocks, std::string lease) {
  RemoteKvSource source{.engine_id = "prefill-0",
                        .host = "10.0.0.7",
                        .port = 8200,
                        .request_id = std::move(lease),
                        .block_ids = {},
                        .num_tokens = num_tokens};
  for (int32_t i = 0; i < num_blocks; ++i) source.block_ids.push_back(40 + i);
  return source;
}

// The hand-over of request 1 (`prompt`, `max_tokens`): prefilled and held on `prefill`, then added
// to `decode` with the held KV as its remote source and, unless `with_first_token` is false, the
// prefill server's token. The held KV, or nullopt (after a test failure) if either side refused.
std::optional<HeldKv> hand_over(SchedulerHarness& prefill, SchedulerHarness& decode,
                                const std::vector<int32_t>& prompt, int32_t max_tokens,
                                bool with_first_token = true) {
  const std::optional<FinishedSequence> held = prefill_and_hold(prefill, 1, prompt);
  EXPECT_TRUE(held.has_value() && held->held_kv.has_value()) << "the prefill side held nothing";
  if (!held || !held->held_kv) return std::nullopt;
  const HeldKv& kv = *held->held_kv;
  const AddResult added = add_remote(
      decode, remote_request(1, prompt, max_tokens, source_of(kv, "lease-1"),
                             with_first_token ? std::optional(kv.first_token_id) : std::nullopt));
  EXPECT_EQ(added, AddResult::kAccepted);
  if (added != AddResult::kAccepted) return std::nullopt;
  return kv;
}

// What the prefill server would have sampled for `prompt`.
int32_t first_token_for(const SchedulerHarness& h, const std::vector<int32_t>& prompt) {
  return FakeStepModel::next_token(prompt, h.model.config());
}

// ---- prefill side -------------------------------------------------------------------------

TEST(SchedulerRemoteKvTest, HeldPromptKvStaysReferencedUntilReleased) {
  SchedulerHarness prefill(pd_config());
  const std::vector<int32_t> prompt = token_range(kPromptLen, 100);
  NewRequest request;
  request.request_id = 1;
  request.prompt_token_ids = prompt;
  request.stop.max_tokens = 1;
  request.hold_kv_when_finished = true;
  ASSERT_EQ(prefill.scheduler.add_request(request), AddResult::kAccepted);
  prefill.requests[1] = request;
  ASSERT_INVARIANTS(prefill);

  const StepPlan plan = prefill.scheduler.schedule();
  const gpu::SequenceSlice* slice = slice_of(plan, 1);
  ASSERT_NE(slice, nullptr);
  ASSERT_EQ(slice->num_tokens, kPromptLen);
  const auto row_begin =
      plan.batch.block_tables.begin() + slice->block_table_row * plan.batch.max_blocks_per_seq;
  const std::vector<kv_cache::BlockId> prompt_blocks(row_begin,
                                                     row_begin + plan.batch.max_blocks_per_seq);
  const StepUpdate update = complete(prefill, plan);
  ASSERT_INVARIANTS(prefill);

  ASSERT_EQ(update.tokens.size(), 1u);
  ASSERT_EQ(update.finished.size(), 1u);
  const FinishedSequence& finished = update.finished[0];
  EXPECT_EQ(finished.reason, FinishReason::kMaxTokens);
  ASSERT_TRUE(finished.held_kv.has_value());
  const HeldKv& held = *finished.held_kv;
  const int32_t num_prompt_blocks = KvCacheManager::blocks_for_tokens(kPromptLen, kBlockSize);
  ASSERT_EQ(static_cast<int32_t>(held.block_ids.size()), num_prompt_blocks);
  EXPECT_EQ(held.block_ids, prompt_blocks);
  EXPECT_EQ(held.num_tokens, kPromptLen);
  EXPECT_EQ(held.first_token_id, update.tokens[0].token_id);
  EXPECT_EQ(held.first_token_id, prefill.expected_output(1).front());
  // The held blocks hold the prompt, position by position.
  for (int32_t position = 0; position < kPromptLen; ++position) {
    const kv_cache::BlockId block = held.block_ids[static_cast<size_t>(position / kBlockSize)];
    EXPECT_EQ(prefill.model.stored_token(block, position % kBlockSize), prompt[position]);
    EXPECT_EQ(prefill.model.stored_position(block, position % kBlockSize), position);
  }

  EXPECT_FALSE(prefill.scheduler.has_unfinished_requests());
  EXPECT_EQ(prefill.scheduler.stats().num_awaiting_transfer, 1);
  EXPECT_EQ(prefill.scheduler.kv_cache().stats().num_referenced, num_prompt_blocks);
  // Held blocks are neither flushed nor reusable under the same id.
  EXPECT_EQ(prefill.scheduler.flush_prefix_cache(), 0);
  EXPECT_EQ(prefill.scheduler.kv_cache().stats().num_referenced, num_prompt_blocks);
  EXPECT_EQ(prefill.scheduler.add_request(request), AddResult::kDuplicateId);
  ASSERT_INVARIANTS(prefill);

  EXPECT_TRUE(prefill.scheduler.release_transferred(1));
  ASSERT_INVARIANTS(prefill);
  const kv_cache::KvCacheStats kv = prefill.scheduler.kv_cache().stats();
  EXPECT_EQ(kv.num_referenced, 0);
  EXPECT_EQ(kv.num_cached_unreferenced, kPromptLen / kBlockSize);  // the full blocks
  EXPECT_EQ(kv.num_free + kv.num_cached_unreferenced, kNumBlocks);
  EXPECT_EQ(prefill.scheduler.stats().num_awaiting_transfer, 0);
  EXPECT_FALSE(prefill.scheduler.release_transferred(1));
  ASSERT_INVARIANTS(prefill);
}

TEST(SchedulerRemoteKvTest, CancelledHoldRequestHoldsNothing) {
  SchedulerHarness prefill(pd_config());
  NewRequest running;
  running.request_id = 1;
  running.prompt_token_ids = token_range(kPromptLen, 100);
  running.stop.max_tokens = 4;  // still running after its first step
  running.hold_kv_when_finished = true;
  NewRequest waiting = running;
  waiting.request_id = 2;
  waiting.prompt_token_ids = token_range(kPromptLen, 500);
  ASSERT_EQ(prefill.scheduler.add_request(running), AddResult::kAccepted);
  complete(prefill, prefill.scheduler.schedule());
  ASSERT_INVARIANTS(prefill);
  ASSERT_EQ(prefill.scheduler.add_request(waiting), AddResult::kAccepted);
  ASSERT_INVARIANTS(prefill);

  for (const RequestId id : {RequestId{1}, RequestId{2}}) {
    SCOPED_TRACE(id == 1 ? "cancelled while running" : "cancelled while waiting");
    const std::optional<FinishedSequence> cancelled = prefill.scheduler.cancel(id);
    ASSERT_INVARIANTS(prefill);
    ASSERT_TRUE(cancelled.has_value());
    EXPECT_EQ(cancelled->reason, FinishReason::kCancelled);
    EXPECT_FALSE(cancelled->held_kv.has_value());
    EXPECT_FALSE(prefill.scheduler.release_transferred(id));
  }
  EXPECT_EQ(prefill.scheduler.stats().num_awaiting_transfer, 0);
  EXPECT_EQ(prefill.scheduler.kv_cache().stats().num_referenced, 0);
  EXPECT_TRUE(prefill.scheduler.take_kv_work().empty());
}

// ---- decode side --------------------------------------------------------------------------

TEST(SchedulerRemoteKvTest, PulledPromptKvDecodesLikeALocalPrefill) {
  SchedulerHarness prefill(pd_config());
  SchedulerHarness decode(pd_config());
  const std::vector<int32_t> prompt = token_range(kPromptLen, 100);
  const std::optional<FinishedSequence> held = prefill_and_hold(prefill, 1, prompt);
  ASSERT_TRUE(held.has_value() && held->held_kv.has_value());
  const int32_t first_token = held->held_kv->first_token_id;
  const RemoteKvSource source = source_of(*held->held_kv, "lease-1");

  ASSERT_EQ(decode.add(7, token_range(10, 900), 6), AddResult::kAccepted);  // a local neighbour
  ASSERT_EQ(add_remote(decode, remote_request(1, prompt, 6, source, first_token)),
            AddResult::kAccepted);
  ASSERT_INVARIANTS(decode);

  // The prefill server's token is reported at once; nothing is pulled before admission.
  KvWork work = take_work(decode);
  ASSERT_EQ(work.events.tokens.size(), 1u);
  EXPECT_EQ(work.events.tokens[0].request_id, 1u);
  EXPECT_EQ(work.events.tokens[0].token_id, first_token);
  EXPECT_EQ(work.events.tokens[0].num_generated_tokens, 1);
  EXPECT_TRUE(work.events.finished.empty());
  EXPECT_TRUE(work.pulls.empty());
  EXPECT_TRUE(work.releases.empty());

  // Admitted: blocks and a pull order, but no span until the KV is resident.
  StepPlan plan = decode.scheduler.schedule();
  EXPECT_EQ(ids_in(plan), std::vector<RequestId>{7});
  const Sequence* seq = decode.scheduler.find(1);
  ASSERT_NE(seq, nullptr);
  EXPECT_EQ(seq->state, SequenceState::kAwaitingKv);
  work = take_work(decode);
  ASSERT_EQ(work.pulls.size(), 1u);
  EXPECT_TRUE(work.releases.empty());
  const KvPullOrder order = work.pulls[0];
  EXPECT_EQ(order.request_id, 1u);
  EXPECT_EQ(order.source.request_id, "lease-1");
  EXPECT_EQ(order.source.block_ids, source.block_ids);
  const size_t num_prompt_blocks = 4;
  ASSERT_EQ(seq->kv.blocks.size(), num_prompt_blocks);
  ASSERT_EQ(order.copies.size(), num_prompt_blocks);  // nothing of it is cached here
  for (size_t i = 0; i < num_prompt_blocks; ++i) {
    EXPECT_EQ(order.copies[i].source, source.block_ids[i]) << i;
    EXPECT_EQ(order.copies[i].destination, seq->kv.blocks[i]) << i;
  }
  EXPECT_EQ(decode.scheduler.stats().num_awaiting_kv, 1);
  EXPECT_EQ(decode.scheduler.stats().num_kv_pulls, 1u);
  complete(decode, plan);
  ASSERT_INVARIANTS(decode);
  // While the pull runs, steps go on without it.
  plan = decode.scheduler.schedule();
  EXPECT_EQ(ids_in(plan), std::vector<RequestId>{7});
  complete(decode, plan);
  ASSERT_INVARIANTS(decode);
  EXPECT_TRUE(decode.scheduler.take_kv_work().pulls.empty());  // one pull, not one per step

  ASSERT_NO_FATAL_FAILURE(pull_and_release(decode, prefill, order));
  ASSERT_INVARIANTS(prefill);
  EXPECT_TRUE(take_work(decode).empty());
  EXPECT_EQ(seq->state, SequenceState::kRunning);
  EXPECT_EQ(seq->num_computed_tokens, kPromptLen);
  EXPECT_EQ(decode.scheduler.stats().num_awaiting_kv, 0);

  // It decodes the first token next, at its position right after the prompt.
  plan = decode.scheduler.schedule();
  const gpu::SequenceSlice* slice = slice_of(plan, 1);
  ASSERT_NE(slice, nullptr);
  EXPECT_EQ(slice->num_tokens, 1);
  EXPECT_EQ(slice->context_len, kPromptLen + 1);
  EXPECT_TRUE(slice->sample);
  EXPECT_EQ(plan.batch.positions[static_cast<size_t>(slice->token_offset)], kPromptLen);
  EXPECT_EQ(plan.batch.token_ids[static_cast<size_t>(slice->token_offset)], first_token);
  // The pulled blocks are named once, in this first plan after the pull, so that a backend
  // whose KV is not the host memory they landed in (CUDA's pinned mirror) copies them in first.
  std::vector<int32_t> pulled;
  for (const BlockCopy& copy : order.copies) pulled.push_back(copy.destination);
  EXPECT_EQ(plan.batch.kv_blocks_from_host, pulled);
  const StepUpdate update = complete(decode, plan);
  ASSERT_INVARIANTS(decode);
  ASSERT_NO_FATAL_FAILURE(expect_nth_token(update, decode, 1, 2));
  const std::vector<int32_t> expected = decode.expected_output(1);

  ASSERT_NO_FATAL_FAILURE(run_until_idle(decode));
  EXPECT_EQ(decode.outputs[1], expected);
  EXPECT_EQ(decode.outputs[7], decode.expected_output(7));
  EXPECT_EQ(decode.reasons[1], FinishReason::kMaxTokens);
  EXPECT_EQ(decode.scheduler.kv_cache().stats().num_referenced, 0);
  EXPECT_EQ(decode.scheduler.stats().num_kv_pull_fallbacks, 0u);
}

TEST(SchedulerRemoteKvTest, PullSkipsBlocksAlreadyCachedHere) {
  SchedulerHarness prefill(pd_config());
  SchedulerHarness decode(pd_config());
  const std::vector<int32_t> prompt = token_range(kPromptLen, 100);
  ASSERT_EQ(decode.add(9, token_range(48, 100), 2), AddResult::kAccepted);  // 3 blocks of it
  ASSERT_NO_FATAL_FAILURE(run_until_idle(decode));
  ASSERT_EQ(decode.outputs[9], decode.expected_output(9));
  const std::optional<FinishedSequence> held = prefill_and_hold(prefill, 1, prompt);
  ASSERT_TRUE(held.has_value() && held->held_kv.has_value());
  const RemoteKvSource source = source_of(*held->held_kv, "lease-1");

  ASSERT_EQ(add_remote(decode, remote_request(1, prompt, 5, source, held->held_kv->first_token_id)),
            AddResult::kAccepted);
  take_work(decode);
  EXPECT_TRUE(decode.scheduler.schedule().empty());
  ASSERT_INVARIANTS(decode);
  const KvWork work = take_work(decode);
  ASSERT_EQ(work.pulls.size(), 1u);
  const KvPullOrder& order = work.pulls[0];
  const Sequence* seq = decode.scheduler.find(1);
  ASSERT_NE(seq, nullptr);
  ASSERT_EQ(seq->kv.blocks.size(), 4u);
  EXPECT_EQ(seq->num_cached_prompt_tokens, 48);
  // Blocks 0..2 (tokens 0..47) hit this pool's cache; only block 3 (tokens 48, 49) is pulled.
  ASSERT_EQ(order.copies.size(), 1u);
  EXPECT_EQ(order.copies[0].source, source.block_ids[3]);
  EXPECT_EQ(order.copies[0].destination, seq->kv.blocks[3]);

  ASSERT_NO_FATAL_FAILURE(pull_and_release(decode, prefill, order));
  ASSERT_NO_FATAL_FAILURE(run_until_idle(decode));
  EXPECT_EQ(decode.outputs[1], decode.expected_output(1));
  EXPECT_EQ(decode.scheduler.kv_cache().stats().num_referenced, 0);
}

TEST(SchedulerRemoteKvTest, FailedPullComputesThePromptHere) {
  SchedulerHarness decode(pd_config());
  const std::vector<int32_t> prompt = token_range(kPromptLen, 100);
  const int32_t first_token = first_token_for(decode, prompt);
  ASSERT_EQ(
      add_remote(decode, remote_request(1, prompt, 5, made_up_source(kPromptLen, 4, "lease-1"),
                                        first_token)),
      AddResult::kAccepted);
  take_work(decode);
  EXPECT_TRUE(decode.scheduler.schedule().empty());
  ASSERT_INVARIANTS(decode);
  ASSERT_EQ(take_work(decode).pulls.size(), 1u);

  decode.scheduler.kv_resident(1, /*ok=*/false);
  ASSERT_INVARIANTS(decode);
  // The kv-cache actor released (or gave up on) the lease itself.
  const KvWork work = take_work(decode);
  EXPECT_TRUE(work.releases.empty());
  EXPECT_TRUE(work.pulls.empty());
  EXPECT_TRUE(work.events.tokens.empty());
  const SchedulerStats stats = decode.scheduler.stats();
  EXPECT_EQ(stats.num_kv_pull_fallbacks, 1u);
  EXPECT_EQ(stats.num_awaiting_kv, 0);
  EXPECT_EQ(stats.num_waiting, 1);
  EXPECT_EQ(stats.kv.num_referenced, 0);
  EXPECT_EQ(stats.kv.num_cached_blocks, 0);  // blocks never written must not reach the cache

  // Prompt and first token computed here from position 0, sampling the second token.
  const StepPlan plan = decode.scheduler.schedule();
  const gpu::SequenceSlice* slice = slice_of(plan, 1);
  ASSERT_NE(slice, nullptr);
  EXPECT_EQ(slice->num_tokens, kPromptLen + 1);
  EXPECT_EQ(slice->context_len, kPromptLen + 1);
  EXPECT_TRUE(slice->sample);
  const auto offset = static_cast<size_t>(slice->token_offset);
  EXPECT_EQ(plan.batch.positions[offset], 0);
  std::vector<int32_t> computed(
      plan.batch.token_ids.begin() + static_cast<ptrdiff_t>(offset),
      plan.batch.token_ids.begin() + static_cast<ptrdiff_t>(offset + kPromptLen + 1));
  std::vector<int32_t> prompt_and_first = prompt;
  prompt_and_first.push_back(first_token);
  EXPECT_EQ(computed, prompt_and_first);
  complete(decode, plan);
  ASSERT_INVARIANTS(decode);
  EXPECT_TRUE(take_work(decode).pulls.empty());

  ASSERT_NO_FATAL_FAILURE(run_until_idle(decode));
  EXPECT_EQ(decode.outputs[1], decode.expected_output(1));
  EXPECT_EQ(decode.scheduler.stats().num_kv_pulls, 1u);
  EXPECT_EQ(decode.scheduler.kv_cache().stats().num_referenced, 0);
}

TEST(SchedulerRemoteKvTest, CancelWhileAwaitingKvKeepsTheBlocksUntilThePullIsOver) {
  for (const bool ok : {true, false}) {
    SCOPED_TRACE(ok ? "pull succeeded" : "pull failed");
    SchedulerHarness decode(pd_config());
    const std::vector<int32_t> prompt = token_range(kPromptLen, 100);
    const NewRequest request = remote_request(
        1, prompt, 5, made_up_source(kPromptLen, 4, "lease-1"), first_token_for(decode, prompt));
    ASSERT_EQ(add_remote(decode, request), AddResult::kAccepted);
    take_work(decode);
    EXPECT_TRUE(decode.scheduler.schedule().empty());
    ASSERT_EQ(take_work(decode).pulls.size(), 1u);
    ASSERT_INVARIANTS(decode);

    const std::optional<FinishedSequence> cancelled = decode.scheduler.cancel(1);
    ASSERT_INVARIANTS(decode);
    ASSERT_TRUE(cancelled.has_value());
    EXPECT_EQ(cancelled->reason, FinishReason::kCancelled);
    EXPECT_EQ(cancelled->num_generated_tokens, 1);
    EXPECT_FALSE(cancelled->held_kv.has_value());
    EXPECT_EQ(decode.scheduler.find(1), nullptr);
    EXPECT_FALSE(decode.scheduler.has_unfinished_requests());
    EXPECT_EQ(decode.scheduler.stats().num_awaiting_kv, 0);
    // The transport may still write into the blocks: they stay held, and the lease stays with
    // the pull (releasing it now would let the prefill server reuse blocks being read).
    EXPECT_EQ(decode.scheduler.kv_cache().stats().num_referenced, 4);
    const KvWork work = take_work(decode);
    EXPECT_TRUE(work.pulls.empty());
    EXPECT_TRUE(work.releases.empty());
    EXPECT_EQ(decode.scheduler.add_request(request), AddResult::kDuplicateId);
    EXPECT_TRUE(decode.scheduler.schedule().empty());
    ASSERT_INVARIANTS(decode);

    decode.scheduler.kv_resident(1, ok);
    ASSERT_INVARIANTS(decode);
    const kv_cache::KvCacheStats kv = decode.scheduler.kv_cache().stats();
    EXPECT_EQ(kv.num_referenced, 0);
    EXPECT_EQ(kv.num_free, kNumBlocks);  // nothing of a cancelled pull reaches the cache
    EXPECT_TRUE(decode.scheduler.take_kv_work().empty());
    EXPECT_TRUE(decode.scheduler.schedule().empty());  // not brought back to life
    EXPECT_FALSE(decode.scheduler.has_unfinished_requests());
    EXPECT_EQ(decode.scheduler.add_request(request), AddResult::kAccepted);  // the id is free
    ASSERT_INVARIANTS(decode);
  }
}

TEST(SchedulerRemoteKvTest, CancelBeforeAdmissionReleasesTheLease) {
  SchedulerHarness decode(pd_config());
  const std::vector<int32_t> prompt = token_range(kPromptLen, 100);
  const RemoteKvSource source = made_up_source(kPromptLen, 4, "lease-1");
  ASSERT_EQ(
      add_remote(decode, remote_request(1, prompt, 5, source, first_token_for(decode, prompt))),
      AddResult::kAccepted);
  take_work(decode);
  ASSERT_INVARIANTS(decode);

  const std::optional<FinishedSequence> cancelled = decode.scheduler.cancel(1);
  ASSERT_INVARIANTS(decode);
  ASSERT_TRUE(cancelled.has_value());
  EXPECT_EQ(cancelled->reason, FinishReason::kCancelled);
  KvWork work = take_work(decode);
  ASSERT_EQ(work.releases.size(), 1u);
  EXPECT_EQ(work.releases[0].request_id, "lease-1");
  EXPECT_EQ(work.releases[0].engine_id, source.engine_id);
  EXPECT_EQ(work.releases[0].block_ids, source.block_ids);
  EXPECT_TRUE(work.pulls.empty());

  EXPECT_TRUE(decode.scheduler.schedule().empty());
  work = take_work(decode);
  EXPECT_TRUE(work.empty());
  EXPECT_EQ(decode.scheduler.stats().num_kv_pulls, 0u);
  EXPECT_EQ(decode.scheduler.kv_cache().stats().num_referenced, 0);
  ASSERT_INVARIANTS(decode);
}

TEST(SchedulerRemoteKvTest, FirstTokenThatIsEosFinishesAtOnce) {
  SchedulerHarness decode(pd_config());
  const std::vector<int32_t> prompt = token_range(kPromptLen, 100);
  ASSERT_EQ(
      add_remote(decode, remote_request(1, prompt, 5, made_up_source(kPromptLen, 4, "lease-1"),
                                        kEosTokenId)),
      AddResult::kAccepted);
  ASSERT_INVARIANTS(decode);

  KvWork work = take_work(decode);
  ASSERT_EQ(work.events.tokens.size(), 1u);
  EXPECT_EQ(work.events.tokens[0].token_id, kEosTokenId);
  ASSERT_EQ(work.events.finished.size(), 1u);
  EXPECT_EQ(work.events.finished[0].request_id, 1u);
  EXPECT_EQ(work.events.finished[0].reason, FinishReason::kEos);
  EXPECT_EQ(work.events.finished[0].num_generated_tokens, 1);
  ASSERT_EQ(work.releases.size(), 1u);
  EXPECT_EQ(work.releases[0].request_id, "lease-1");
  EXPECT_TRUE(work.pulls.empty());
  EXPECT_FALSE(decode.scheduler.has_unfinished_requests());

  EXPECT_TRUE(decode.scheduler.schedule().empty());
  ASSERT_INVARIANTS(decode);
  EXPECT_TRUE(take_work(decode).empty());
  EXPECT_EQ(decode.scheduler.stats().num_kv_pulls, 0u);
  EXPECT_EQ(decode.scheduler.kv_cache().stats().num_referenced, 0);
}

TEST(SchedulerRemoteKvTest, WithoutAFirstTokenTheLastPromptPositionIsRecomputed) {
  SchedulerHarness prefill(pd_config());
  SchedulerHarness decode(pd_config());
  const std::vector<int32_t> prompt = token_range(kPromptLen, 100);
  const std::optional<HeldKv> held =
      hand_over(prefill, decode, prompt, /*max_tokens=*/4, /*with_first_token=*/false);
  ASSERT_TRUE(held.has_value());
  ASSERT_INVARIANTS(decode);
  EXPECT_TRUE(take_work(decode).empty());  // no token to report yet

  EXPECT_TRUE(decode.scheduler.schedule().empty());
  ASSERT_INVARIANTS(decode);
  const KvWork work = take_work(decode);
  ASSERT_EQ(work.pulls.size(), 1u);
  EXPECT_EQ(work.pulls[0].copies.size(), 4u);
  ASSERT_NO_FATAL_FAILURE(pull_and_release(decode, prefill, work.pulls[0]));

  const StepPlan plan = decode.scheduler.schedule();
  const gpu::SequenceSlice* slice = slice_of(plan, 1);
  ASSERT_NE(slice, nullptr);
  EXPECT_EQ(slice->num_tokens, 1);
  EXPECT_EQ(slice->context_len, kPromptLen);
  EXPECT_TRUE(slice->sample);
  EXPECT_EQ(plan.batch.positions[static_cast<size_t>(slice->token_offset)], kPromptLen - 1);
  EXPECT_EQ(plan.batch.token_ids[static_cast<size_t>(slice->token_offset)], prompt.back());
  const StepUpdate update = complete(decode, plan);
  ASSERT_INVARIANTS(decode);
  ASSERT_NO_FATAL_FAILURE(expect_nth_token(update, decode, 1, 1));
  const std::vector<int32_t> expected = decode.expected_output(1);
  EXPECT_EQ(expected[0], held->first_token_id);  // the prefill server's own sample

  ASSERT_NO_FATAL_FAILURE(run_until_idle(decode));
  EXPECT_EQ(decode.outputs[1], expected);
  EXPECT_EQ(decode.scheduler.kv_cache().stats().num_referenced, 0);
}

TEST(SchedulerRemoteKvTest, UnusableRemoteSourceFallsBackToALocalPrefillAtOnce) {
  struct Case {
    const char* what;
    RemoteKvSource source;
  };
  const Case cases[] = {
      {"num_tokens differs from the prompt length", made_up_source(kPromptLen - 1, 4, "lease-1")},
      {"too few block ids for the prompt", made_up_source(kPromptLen, 3, "lease-1")},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    SchedulerHarness decode(pd_config());
    const std::vector<int32_t> prompt = token_range(kPromptLen, 100);
    ASSERT_EQ(
        add_remote(decode, remote_request(1, prompt, 4, c.source, first_token_for(decode, prompt))),
        AddResult::kAccepted);
    ASSERT_INVARIANTS(decode);
    KvWork work = take_work(decode);
    ASSERT_EQ(work.releases.size(), 1u);
    EXPECT_EQ(work.releases[0].request_id, "lease-1");
    EXPECT_TRUE(work.pulls.empty());
    EXPECT_EQ(work.events.tokens.size(), 1u);  // the first token still counts
    EXPECT_EQ(decode.scheduler.stats().num_kv_pull_fallbacks, 1u);

    const StepPlan plan = decode.scheduler.schedule();
    const gpu::SequenceSlice* slice = slice_of(plan, 1);
    ASSERT_NE(slice, nullptr);
    EXPECT_EQ(slice->num_tokens, kPromptLen + 1);
    EXPECT_EQ(plan.batch.positions[static_cast<size_t>(slice->token_offset)], 0);
    EXPECT_TRUE(slice->sample);
    work = take_work(decode);
    EXPECT_TRUE(work.pulls.empty());
    EXPECT_TRUE(work.releases.empty());
    complete(decode, plan);
    ASSERT_INVARIANTS(decode);

    ASSERT_NO_FATAL_FAILURE(run_until_idle(decode));
    EXPECT_EQ(decode.outputs[1], decode.expected_output(1));
    EXPECT_EQ(decode.scheduler.stats().num_kv_pulls, 0u);
    EXPECT_EQ(decode.scheduler.stats().num_kv_pull_fallbacks, 1u);
  }
}

TEST(SchedulerRemoteKvTest, AwaitingSequencesCountAgainstMaxNumSeqs) {
  auto config = pd_config();
  config.max_num_seqs = 1;
  SchedulerHarness prefill(config);
  SchedulerHarness decode(config);
  const std::vector<int32_t> prompt = token_range(kPromptLen, 100);
  ASSERT_TRUE(hand_over(prefill, decode, prompt, /*max_tokens=*/3).has_value());
  ASSERT_EQ(decode.add(2, token_range(10, 900), 3), AddResult::kAccepted);
  take_work(decode);

  // 1 takes the only slot while its KV is pulled; 2 is not admitted meanwhile.
  EXPECT_TRUE(decode.scheduler.schedule().empty());
  ASSERT_INVARIANTS(decode);
  EXPECT_TRUE(decode.scheduler.schedule().empty());
  ASSERT_INVARIANTS(decode);
  SchedulerStats stats = decode.scheduler.stats();
  EXPECT_EQ(stats.num_awaiting_kv, 1);
  EXPECT_EQ(stats.num_waiting, 1);
  EXPECT_EQ(stats.num_running, 0);
  const KvWork work = take_work(decode);
  ASSERT_EQ(work.pulls.size(), 1u);

  ASSERT_NO_FATAL_FAILURE(pull_and_release(decode, prefill, work.pulls[0]));
  const StepPlan plan = decode.scheduler.schedule();
  EXPECT_EQ(ids_in(plan), std::vector<RequestId>{1});
  complete(decode, plan);
  ASSERT_INVARIANTS(decode);
  stats = decode.scheduler.stats();
  EXPECT_EQ(stats.num_running, 1);
  EXPECT_EQ(stats.num_waiting, 1);

  ASSERT_NO_FATAL_FAILURE(run_until_idle(decode));
  EXPECT_EQ(decode.outputs[1], decode.expected_output(1));
  EXPECT_EQ(decode.outputs[2], decode.expected_output(2));
}

TEST(SchedulerRemoteKvTest, FullyCachedRemotePromptNeedsNoPull) {
  SchedulerHarness decode(pd_config());
  const std::vector<int32_t> prompt = token_range(48, 100);  // exactly 3 blocks
  ASSERT_EQ(decode.add(9, prompt, 2), AddResult::kAccepted);
  ASSERT_NO_FATAL_FAILURE(run_until_idle(decode));
  ASSERT_EQ(add_remote(decode, remote_request(1, prompt, 5, made_up_source(48, 3, "lease-1"),
                                              first_token_for(decode, prompt))),
            AddResult::kAccepted);
  take_work(decode);

  EXPECT_TRUE(decode.scheduler.schedule().empty());
  ASSERT_INVARIANTS(decode);
  // Every prompt block hit this pool's cache: no pull, the lease goes at once, and it runs.
  const KvWork work = take_work(decode);
  EXPECT_TRUE(work.pulls.empty());
  ASSERT_EQ(work.releases.size(), 1u);
  EXPECT_EQ(work.releases[0].request_id, "lease-1");
  const Sequence* seq = decode.scheduler.find(1);
  ASSERT_NE(seq, nullptr);
  EXPECT_EQ(seq->state, SequenceState::kRunning);
  EXPECT_EQ(seq->num_computed_tokens, 48);
  EXPECT_EQ(decode.scheduler.stats().num_kv_pulls, 0u);

  ASSERT_NO_FATAL_FAILURE(run_until_idle(decode));
  EXPECT_EQ(decode.outputs[1], decode.expected_output(1));
}

TEST(SchedulerRemoteKvTest, PulledBlocksServeLaterLocalRequests) {
  SchedulerHarness prefill(pd_config());
  SchedulerHarness decode(pd_config());
  const std::vector<int32_t> prompt = token_range(kPromptLen, 100);
  ASSERT_TRUE(hand_over(prefill, decode, prompt, /*max_tokens=*/3).has_value());
  take_work(decode);
  EXPECT_TRUE(decode.scheduler.schedule().empty());
  const KvWork work = take_work(decode);
  ASSERT_EQ(work.pulls.size(), 1u);
  ASSERT_NO_FATAL_FAILURE(pull_and_release(decode, prefill, work.pulls[0]));
  ASSERT_NO_FATAL_FAILURE(run_until_idle(decode));
  ASSERT_EQ(decode.outputs[1], decode.expected_output(1));

  // The pulled full blocks were registered in this pool's prefix cache.
  ASSERT_EQ(decode.add(2, prompt, 3), AddResult::kAccepted);
  const StepPlan plan = decode.scheduler.schedule();
  const gpu::SequenceSlice* slice = slice_of(plan, 2);
  ASSERT_NE(slice, nullptr);
  EXPECT_EQ(slice->num_tokens, kPromptLen - 48);
  EXPECT_EQ(decode.scheduler.find(2)->num_cached_prompt_tokens, 48);
  complete(decode, plan);
  ASSERT_INVARIANTS(decode);
  ASSERT_NO_FATAL_FAILURE(run_until_idle(decode));
  EXPECT_EQ(decode.outputs[2], decode.expected_output(2));
}

// Found while writing these tests: the in-process handoff's slot check counts running
// sequences only, not those awaiting a remote pull.
TEST(SchedulerRemoteKvTest, AwaitingSequencesCountAgainstMaxNumSeqsForAdmitTransferred) {
  auto config = pd_config();
  config.max_num_seqs = 1;
  auto prefill_config = config;
  prefill_config.role = SchedulerRole::kPrefillOnly;
  SchedulerHarness in_process_prefill(prefill_config);
  SchedulerHarness decode(config);
  ASSERT_EQ(in_process_prefill.add(3, token_range(20, 700), 8), AddResult::kAccepted);
  complete(in_process_prefill, in_process_prefill.scheduler.schedule());
  const std::vector<PrefillHandoff> handoffs =
      in_process_prefill.scheduler.take_completed_prefill();
  ASSERT_EQ(handoffs.size(), 1u);

  const std::vector<int32_t> prompt = token_range(kPromptLen, 100);
  ASSERT_EQ(
      add_remote(decode, remote_request(1, prompt, 5, made_up_source(kPromptLen, 4, "lease-1"),
                                        first_token_for(decode, prompt))),
      AddResult::kAccepted);
  EXPECT_TRUE(decode.scheduler.schedule().empty());
  ASSERT_EQ(decode.scheduler.stats().num_awaiting_kv, 1);
  ASSERT_INVARIANTS(decode);

  // The only slot is taken by the awaiting sequence.
  EXPECT_EQ(to_string(decode.scheduler.admit_transferred(handoffs[0]).result),
            to_string(AddResult::kRetryLater));
  ASSERT_INVARIANTS(decode);
}

// Found while writing these tests: scheduler.hpp's policy lets a waiting head preempt a
// lower-priority running sequence; a remote_kv head that finds no free blocks does not.
TEST(SchedulerRemoteKvTest, HighPriorityRemoteRequestPreemptsALowerPriorityOneForBlocks) {
  for (const bool remote : {false, true}) {
    SCOPED_TRACE(remote ? "remote_kv request" : "ordinary request (the reference behaviour)");
    auto config = pd_config();
    config.num_blocks = 8;  // the low-priority request below takes 7 of them
    SchedulerHarness decode(config);
    ASSERT_EQ(decode.add(5, token_range(100, 300), 20, Priority::kLow), AddResult::kAccepted);
    complete(decode, decode.scheduler.schedule());
    ASSERT_INVARIANTS(decode);
    const std::vector<int32_t> prompt = token_range(kPromptLen, 100);
    NewRequest request = remote_request(1, prompt, 5, made_up_source(kPromptLen, 4, "lease-1"),
                                        first_token_for(decode, prompt));
    request.priority = Priority::kHigh;
    if (!remote) request.remote_kv.reset();
    ASSERT_EQ(add_remote(decode, request), AddResult::kAccepted);
    take_work(decode);

    const StepPlan plan = decode.scheduler.schedule();
    ASSERT_INVARIANTS(decode);
    EXPECT_EQ(plan.preempted, std::vector<RequestId>{5});
    ASSERT_NE(decode.scheduler.find(1), nullptr);
    EXPECT_EQ(to_string(decode.scheduler.find(1)->state),
              to_string(remote ? SequenceState::kAwaitingKv : SequenceState::kRunning));
    EXPECT_EQ(take_work(decode).pulls.size(), remote ? 1u : 0u);
  }
}

}  // namespace
}  // namespace troupe::scheduler
