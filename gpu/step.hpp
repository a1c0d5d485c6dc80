// The seam between the scheduler and a backend: one forward step for a mixed batch of prefill
// chunks and decode tokens, flattened so a backend (CPU or CUDA) can consume it without knowing
// anything about requests, priorities or text (docs/design.md §2).
//
// Thread-safety: plain values. The scheduler thread builds a StepBatch and hands it over by move;
// the backend's thread owns it from then on.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/sampling_params.hpp"

namespace troupe::gpu {

// One scheduled sequence in a step.
//
//   token_ids:  [ seq0 span ........ | seq1 | seq2 span .... ]
//                ^ token_offset        num_tokens of each span
//   The span holds positions [context_len - num_tokens, context_len) of the sequence; KV for
//   positions before the span is already in the blocks of its block-table row.
struct SequenceSlice {
  uint64_t seq_id = 0;          // opaque to the backend; stable for the sequence's life
  int32_t token_offset = 0;     // first token of this span in StepBatch::token_ids
  int32_t num_tokens = 0;       // tokens computed this step (prefill chunk, or 1 for decode)
  int32_t context_len = 0;      // tokens in KV once this step is done
  int32_t block_table_row = 0;  // row of StepBatch::block_tables
  bool sample = false;          // sample one token from the span's last position
  int32_t sampling_index = -1;  // into StepBatch::sampling when sample is true
  // Positions below this hold the prompt, the rest generated tokens. The CPU backend keys its
  // attention reduction order on it, the way llama.cpp computes them (a prompt in one batched
  // pass, generated tokens one at a time), so a token's result depends neither on how its
  // prompt was chunked (a 1-token remainder after a prefix-cache hit, say) nor on whether its
  // sequence was preempted and recomputed. -1 (hand-built batches): decided by span size.
  int32_t num_prompt_tokens = -1;
  // Speculative decoding: the span's last num_draft_tokens tokens are drafts, guesses of what
  // follows the token before them (then 0 < num_draft_tokens < num_tokens and sample is true).
  // The backend computes logits at each of the span's last 1 + num_draft_tokens positions and
  // samples them in order, as if each earlier draft had been generated; it keeps draft i while
  // the token sampled at the position before it equals it, and stops at the first token that
  // differs (or the one sampled after the last draft). StepResult::tokens then holds every
  // token kept, that last one included: 1 + (drafts accepted) tokens for this slice.
  int32_t num_draft_tokens = 0;
  // Prompt outputs (issue 37), both off by default; positions are absolute and inside the span.
  // Scores: the logprob, rank and score_top_n best alternatives of the token that follows each
  // position in [scored_begin, scored_begin + num_scored) — that token is
  // StepBatch::score_targets[score_offset + i] — from the same logits rows sampling would use.
  int32_t scored_begin = 0;
  int32_t num_scored = 0;
  int32_t score_offset = 0;
  int32_t score_top_n = 0;
  // Embeddings: the final-norm hidden state (the lm-head's input) of each position in
  // [hidden_begin, hidden_begin + num_hidden).
  int32_t hidden_begin = 0;
  int32_t num_hidden = 0;

  bool has_prompt_outputs() const { return num_scored > 0 || num_hidden > 0; }
};

// Sampling inputs of one sampling sequence.
struct SamplingSlot {
  model::SamplingParams params;
  // Number of tokens this sequence generated before this step: with params.seed it fixes the
  // random stream, so a sequence samples the same token whether or not it was preempted.
  int32_t num_generated = 0;
  // Its penalty window in StepBatch::recent_tokens. With drafts the window is followed there
  // by the slice's draft tokens (not counted in recent_count): the position after draft i
  // sees the window plus drafts 0..i.
  int32_t recent_offset = 0;
  int32_t recent_count = 0;
  // The ids that end generation (the model's EOS unless ignore_eos, then the request's
  // stop_token_ids). The backend masks them while num_generated < params.min_tokens; the
  // scheduler fills them only then (empty otherwise), so the common slot carries nothing.
  std::vector<int32_t> end_token_ids;
  // Structured output: the row of StepBatch::token_bitmask that says which tokens this slot may
  // sample (applied before logit_bias, penalties, filters and greedy); -1: unconstrained (also
  // when the grammar allows every token at this point).
  int32_t bitmask_row = -1;

  // `ahead`: tokens generated after num_generated before the one sampled (verify spans: the
  // drafts accepted before that position).
  bool masks_end_tokens(int32_t ahead = 0) const {
    return num_generated + ahead < params.min_tokens && !end_token_ids.empty();
  }
};

// A request to give a step up, from the scheduler's thread to the backend's. The scheduler asks
// when a newcomer's first token would otherwise wait for the step in flight (scheduler.hpp,
// first-token interrupts). A backend honours it only where nothing of the step is visible yet
// and little is lost: the CPU backend between layers in the first half of the forward pass
// (past half, finishing is both the shorter wait and the smaller waste), after the step's KV
// uploads and never during sampling; it then completes the step as StepOutcome::interrupted.
// Backend::supports_interrupts() says which backends honour it: not CUDA (its steps are queued
// on the device whole, and short), whose engine never sets it.
//
// Thread-safety: request() and requested() from any thread. Nothing is handed over through it,
// so relaxed order suffices.
class StepInterrupt {
 public:
  void request() { requested_.store(true, std::memory_order_relaxed); }
  bool requested() const { return requested_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> requested_{false};
};

struct StepBatch {
  uint64_t step_id = 0;
  std::vector<int32_t> token_ids;   // all spans, concatenated
  std::vector<int32_t> positions;   // absolute position of each token in token_ids
  std::vector<SequenceSlice> seqs;
  // [num_kv_groups][seqs.size()][max_blocks_per_seq] physical KV block ids (pages), padded with
  // -1 (gpu/kv_groups.hpp). Group 0 is every layer of a model without sliding-window layers;
  // with them, groups 1.. are the sliding layers', whose entries below a sequence's window are
  // -1 (their pages were freed: the backend reads such keys as masked, never their memory).
  std::vector<int32_t> block_tables;
  int32_t max_blocks_per_seq = 0;
  int32_t num_kv_groups = 1;
  std::vector<SamplingSlot> sampling;
  std::vector<int32_t> recent_tokens;  // penalty windows of the sampling slots, concatenated
  // Blocks whose KV arrived in the backend's host memory (kv_host_memory()) since the last step:
  // pulled from another server. A backend whose KV lives elsewhere (CUDA) copies them in before
  // this step's forward pass; the CPU backend's KV is that memory and ignores the list.
  std::vector<int32_t> kv_blocks_from_host;
  // Structured output (issue 19): rows of bitmask_num_words uint32 words, one per constrained
  // sampling slot (SamplingSlot::bitmask_row), in model/grammar/token_bitmask.hpp's layout
  // (bit t % 32 of word t / 32 set: token t allowed; ids past the row's bits: not allowed).
  std::vector<uint32_t> token_bitmask;
  int32_t bitmask_num_words = 0;
  // Set when the scheduler may ask to give this step up; null: it runs to its end.
  std::shared_ptr<StepInterrupt> interrupt;
  // The tokens scored positions predict (SequenceSlice::score_offset), all slices concatenated.
  std::vector<int32_t> score_targets;

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  // The slot's bitmask row; empty when it is unconstrained.
  std::span<const uint32_t> bitmask_of(const SamplingSlot& slot) const {
    if (slot.bitmask_row < 0 || bitmask_num_words <= 0) return {};
    return {token_bitmask.data() + static_cast<size_t>(slot.bitmask_row) * bitmask_num_words,
            static_cast<size_t>(bitmask_num_words)};
  }
};

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

struct SampledToken {
  uint64_t seq_id = 0;
  int32_t token_id = 0;
  float logprob = 0.0f;                    // filled when params.logprobs
  std::vector<TokenLogprob> top_logprobs;  // params.top_logprobs entries, best first
};

// The score of one prompt token: its logprob under the logits of the position before it (raw
// log_softmax, as sampled tokens' logprobs), its rank (1 + tokens with a higher logit) and the
// best alternatives.
struct ScoredToken {
  int32_t token_id = 0;
  float logprob = 0.0f;
  int32_t rank = 0;
  std::vector<TokenLogprob> top_logprobs;
};

// A slice's scores, for positions [first_position, first_position + tokens.size()).
struct PromptScores {
  uint64_t seq_id = 0;
  int32_t first_position = 0;
  std::vector<ScoredToken> tokens;
};

// A slice's final-norm hidden states, rows of `width` floats for consecutive positions from
// first_position.
struct HiddenRows {
  uint64_t seq_id = 0;
  int32_t first_position = 0;
  int32_t width = 0;
  std::vector<float> values;
  int32_t num_rows() const { return width == 0 ? 0 : static_cast<int32_t>(values.size() / width); }
};

struct StepResult {
  uint64_t step_id = 0;
  // One per sampling sequence, in StepBatch::seqs order; a slice with drafts has its kept
  // tokens consecutively, in order (SequenceSlice::num_draft_tokens).
  std::vector<SampledToken> tokens;
  // Prompt outputs, one entry per slice that asked, in StepBatch::seqs order.
  std::vector<PromptScores> scores;
  std::vector<HiddenRows> hidden;
};

}  // namespace troupe::gpu
