// The checks of a StepBatch before the forward pass touches it (see forward.hpp): every index it
// carries is in range, so a bad batch is refused by name and never reads or writes out of
// bounds. Split from forward.cpp, which runs the pass.
#include <stdexcept>
#include <string>

#include "gpu/cpu/forward.hpp"
#include "gpu/kv_table_check.hpp"

namespace troupe::gpu::cpu {
namespace {

[[noreturn]] void bad_batch(const std::string& what) {
  throw std::invalid_argument("StepBatch: " + what);
}

}  // namespace

void LlamaForward::validate(const StepBatch& b) const {
  const model::LlamaConfig& c = weights_.config();
  const int32_t T = b.num_tokens();
  if (b.positions.size() != b.token_ids.size()) bad_batch("positions and token_ids differ in size");
  if (b.num_kv_groups != kv_groups_.num_groups) {
    bad_batch(std::to_string(b.num_kv_groups) + " KV groups, the model has " +
              std::to_string(kv_groups_.num_groups));
  }
  if (b.max_blocks_per_seq < 0 ||
      b.block_tables.size() <
          static_cast<size_t>(b.num_kv_groups) * b.seqs.size() * static_cast<size_t>(b.max_blocks_per_seq)) {
    bad_batch("block_tables smaller than groups x seqs x max_blocks_per_seq");
  }
  for (int32_t id : b.token_ids) {
    if (id < 0 || id >= c.n_vocab) bad_batch("token id " + std::to_string(id) + " out of vocabulary");
  }
  int64_t covered = 0;
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    const SequenceSlice& q = b.seqs[s];
    const std::string who = "seq " + std::to_string(q.seq_id) + ": ";
    if (q.num_tokens <= 0 || q.token_offset < 0 || q.token_offset + q.num_tokens > T) {
      bad_batch(who + "token span out of range");
    }
    covered += q.num_tokens;
    if (q.context_len < q.num_tokens) bad_batch(who + "context_len < num_tokens");
    if (q.block_table_row < 0 || static_cast<size_t>(q.block_table_row) >= b.seqs.size()) {
      bad_batch(who + "block_table_row out of range");
    }
    const int32_t needed = (q.context_len + config_.block_size - 1) / config_.block_size;
    if (needed > b.max_blocks_per_seq) bad_batch(who + "context needs more blocks than the table row");
    if (const auto why =
            missing_kv_page(kv_groups_, b, q, config_.block_size, config_.num_blocks)) {
      bad_batch(who + *why);
    }
    for (int32_t i = 0; i < q.num_tokens; ++i) {
      if (b.positions[q.token_offset + i] != q.context_len - q.num_tokens + i) {
        bad_batch(who + "positions do not match context_len");
      }
    }
    if (q.sample && (q.sampling_index < 0 || static_cast<size_t>(q.sampling_index) >= b.sampling.size())) {
      bad_batch(who + "sampling_index out of range");
    }
    if (q.num_draft_tokens < 0 || (q.num_draft_tokens > 0 && (!q.sample || q.num_draft_tokens >= q.num_tokens))) {
      bad_batch(who + "num_draft_tokens out of range");
    }
    if (q.num_draft_tokens > 0) {
      // Drafts are verified in order against the unconstrained chain (structured output plans
      // none), and their penalty window follows the slot's in recent_tokens.
      const SamplingSlot& slot = b.sampling[static_cast<size_t>(q.sampling_index)];
      if (slot.bitmask_row >= 0) bad_batch(who + "drafts on a grammar-constrained slot");
      if (slot.recent_count > 0 && static_cast<size_t>(slot.recent_offset) + slot.recent_count +
                                           q.num_draft_tokens > b.recent_tokens.size()) {
        bad_batch(who + "drafts missing from the penalty window");
      }
    }
    validate_prompt_outputs(b, q, who);
  }
  if (covered != T) bad_batch("sequence spans do not cover token_ids exactly");
  for (const SamplingSlot& slot : b.sampling) {
    if (slot.recent_offset < 0 || slot.recent_count < 0 ||
        static_cast<size_t>(slot.recent_offset) + slot.recent_count > b.recent_tokens.size()) {
      bad_batch("sampling slot recent window out of range");
    }
  }
}

void LlamaForward::validate_prompt_outputs(const StepBatch& b, const SequenceSlice& q,
                                           const std::string& who) const {
  const int32_t first = q.context_len - q.num_tokens;
  const auto inside = [&](int32_t begin, int32_t count) {
    return count == 0 || (count > 0 && begin >= first && begin + count <= q.context_len);
  };
  if (!inside(q.scored_begin, q.num_scored)) bad_batch(who + "scored positions outside the span");
  if (!inside(q.hidden_begin, q.num_hidden)) bad_batch(who + "hidden positions outside the span");
  if (q.num_scored > 0 && (q.num_draft_tokens > 0 || q.score_top_n < 0 || q.score_offset < 0 ||
                           static_cast<size_t>(q.score_offset) + q.num_scored > b.score_targets.size())) {
    bad_batch(who + "score targets out of range");
  }
  for (int32_t i = 0; i < q.num_scored; ++i) {
    const int32_t target = b.score_targets[static_cast<size_t>(q.score_offset + i)];
    if (target < 0 || target >= weights_.config().n_vocab) {
      bad_batch(who + "score target " + std::to_string(target) + " out of vocabulary");
    }
  }
}

}  // namespace troupe::gpu::cpu
