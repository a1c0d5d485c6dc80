// FakeStepModel: a deterministic stand-in for a forward pass, for scheduler tests only (the
// server always runs a real model). It keeps a fake paged KV store of (token, position) per
// slot, writes each span through the step's block table, and for every sampling sequence READS
// THE WHOLE CONTEXT BACK through the block table and returns next_token(context). So a wrong
// block table, a block evicted or overwritten while in use, or a bad prefix-cache hit changes
// the output, which the tests compare with reference_output() computed from tokens alone.
// With KV groups (num_kv_groups > 1, sliding_window) every span is also written through each
// sliding group's table, and every key inside each span's windows must read back through them:
// a page freed too early (kNoBlock) or reused while in a window fails the check. Each slot also
// keeps a hash of the whole prefix up to it (as real KV depends on every earlier token), so a
// sliding page shared from another history (a bad prefix-cache hit) fails it too.
//
// Thread-safety: test helper; one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "actors/messages/scheduler_types.hpp"
#include "gpu/step.hpp"
#include "model/sampling_params.hpp"

namespace troupe::scheduler::testing {

struct FakeModelConfig {
  int32_t num_blocks = 64;
  int32_t block_size = 16;
  int32_t vocab_size = 1000;
  int32_t eos_token_id = 2;
  uint64_t eos_one_in = 40;  // roughly how often the fake "model" chooses to stop
  // > 0: a text that repeats itself (speculative decoding tests): three times in four the
  // next token is the one copy_period tokens back, so prompt-lookup drafts are mostly right.
  int32_t copy_period = 0;
  int32_t num_kv_groups = 1;   // groups 1.. are sliding windows of sliding_window tokens
  int32_t sliding_window = 0;
};

class FakeStepModel {
 public:
  explicit FakeStepModel(FakeModelConfig config)
      : config_(config),
        slots_(static_cast<size_t>(config.num_blocks) * static_cast<size_t>(config.block_size)) {}

  // The fake model: the next token is a hash of the whole context (so it depends on every
  // earlier token and on nothing else), EOS about once in eos_one_in.
  static int32_t next_token(std::span<const int32_t> context, const FakeModelConfig& config) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int32_t t : context) {
      h ^= static_cast<uint32_t>(t);
      h *= 0x100000001b3ULL;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 32;
    const auto n = static_cast<int32_t>(context.size());
    if (config.copy_period > 0 && n >= config.copy_period && (h >> 40) % 4 != 0) {
      return context[static_cast<size_t>(n - config.copy_period)];
    }
    if (h % config.eos_one_in == 0) return config.eos_token_id;
    return 3 + static_cast<int32_t>((h >> 8) % static_cast<uint64_t>(config.vocab_size - 3));
  }

  // What the scheduler must produce for this request, computed without any KV.
  static std::vector<int32_t> reference_output(std::vector<int32_t> tokens,
                                               const model::StopConditions& stop,
                                               int32_t max_model_len,
                                               const FakeModelConfig& config) {
    const size_t num_prompt = tokens.size();
    std::vector<int32_t> output;
    while (true) {
      const int32_t token = next_token(tokens, config);
      tokens.push_back(token);
      output.push_back(token);
      const bool is_stop_id = std::find(stop.stop_token_ids.begin(), stop.stop_token_ids.end(),
                                        token) != stop.stop_token_ids.end();
      if ((token == config.eos_token_id && !stop.ignore_eos) || is_stop_id) break;
      if (static_cast<int32_t>(tokens.size() - num_prompt) >= stop.max_tokens) break;
      if (static_cast<int32_t>(tokens.size()) >= max_model_len) break;
    }
    return output;
  }

  gpu::StepResult run(const gpu::StepBatch& batch) {
    gpu::StepResult result;
    result.step_id = batch.step_id;
    if (batch.num_kv_groups != config_.num_kv_groups) fail("the batch has another number of KV groups");
    for (const gpu::SequenceSlice& slice : batch.seqs) write_span(batch, slice);
    for (const gpu::SequenceSlice& slice : batch.seqs) check_windows(batch, slice);
    for (const gpu::SequenceSlice& slice : batch.seqs) {
      if (!slice.sample) continue;
      std::vector<int32_t> context = read_context(batch, slice);
      // A verify span (speculative decoding): the position before each draft predicts it; keep
      // drafts while the prediction agrees, and emit the first prediction that does not (or
      // the one after the last draft), as gpu/step.hpp says.
      const int32_t first_row = slice.context_len - 1 - slice.num_draft_tokens;
      for (int32_t row = 0; row <= slice.num_draft_tokens; ++row) {
        const auto seen = std::span<const int32_t>(context).first(static_cast<size_t>(first_row + row + 1));
        const int32_t token = next_token(seen, config_);
        result.tokens.push_back({slice.seq_id, token, -0.5f - static_cast<float>(row), {}});
        if (row == slice.num_draft_tokens || token != context[static_cast<size_t>(first_row + row + 1)]) break;
      }
    }
    return result;
  }

  // P/D: copy one block's KV from another pool's model.
  void copy_block_from(const FakeStepModel& source, int32_t source_block, int32_t block) {
    const auto bs = static_cast<size_t>(config_.block_size);
    std::copy_n(source.slots_.begin() + static_cast<ptrdiff_t>(source_block * bs), bs,
                slots_.begin() + static_cast<ptrdiff_t>(block * bs));
  }

  // The token stored at (block, offset), or -1 when never written.
  int32_t stored_token(int32_t block, int32_t offset) const {
    return slots_[static_cast<size_t>(block * config_.block_size + offset)].token;
  }
  int32_t stored_position(int32_t block, int32_t offset) const {
    return slots_[static_cast<size_t>(block * config_.block_size + offset)].position;
  }

  // First inconsistency seen (bad block table, stale KV, ...); empty when none.
  const std::string& error() const { return error_; }
  const FakeModelConfig& config() const { return config_; }

 private:
  struct Slot {
    int32_t token = -1;
    int32_t position = -1;
    uint64_t prefix = 0;  // hash of the tokens at positions 0..position
  };

  static uint64_t extend(uint64_t prefix, int32_t token) {
    return (prefix ^ static_cast<uint32_t>(token)) * 0x100000001b3ULL + 0x9e3779b97f4a7c15ULL;
  }

  Slot* slot_at(const gpu::StepBatch& batch, const gpu::SequenceSlice& slice, int32_t position,
                int32_t group = 0) {
    const int32_t column = position / config_.block_size;
    if (column >= batch.max_blocks_per_seq) return fail("position beyond the block table");
    const size_t row = static_cast<size_t>(group) * batch.seqs.size() +
                       static_cast<size_t>(slice.block_table_row);
    const int32_t block =
        batch.block_tables[row * static_cast<size_t>(batch.max_blocks_per_seq) + static_cast<size_t>(column)];
    if (block < 0 || block >= config_.num_blocks) return fail("block table entry is not a block");
    return &slots_[static_cast<size_t>(block * config_.block_size + position % config_.block_size)];
  }

  void write_span(const gpu::StepBatch& batch, const gpu::SequenceSlice& slice) {
    // The prefix before the span, from group 0 (whose blocks the outputs check).
    const int32_t first = slice.context_len - slice.num_tokens;
    uint64_t prefix = 0;
    if (first > 0) {
      const Slot* before = slot_at(batch, slice, first - 1);
      if (before == nullptr) return;
      prefix = before->prefix;
    }
    for (int32_t i = 0; i < slice.num_tokens; ++i) {
      const auto index = static_cast<size_t>(slice.token_offset + i);
      const int32_t position = batch.positions[index];
      if (position != first + i) fail("span positions are off");
      prefix = extend(prefix, batch.token_ids[index]);
      for (int32_t g = 0; g < config_.num_kv_groups; ++g) {
        if (Slot* slot = slot_at(batch, slice, position, g)) {
          *slot = {batch.token_ids[index], position, prefix};
        }
      }
    }
  }

  // Every key a query of the span sees in a sliding group reads back through that group.
  void check_windows(const gpu::StepBatch& batch, const gpu::SequenceSlice& slice) {
    const int32_t first_query = slice.context_len - slice.num_tokens;
    const int32_t first_key = std::max(0, first_query + 1 - config_.sliding_window);
    for (int32_t g = 1; g < config_.num_kv_groups; ++g) {
      for (int32_t position = first_key; position < slice.context_len; ++position) {
        const Slot* slot = slot_at(batch, slice, position, g);
        const Slot* global = slot_at(batch, slice, position, 0);
        if (slot == nullptr || global == nullptr) return;
        if (slot->position != position) {
          fail("stale KV in a sliding group: a page in the window was freed or reused");
          return;
        }
        if (slot->prefix != global->prefix) {
          fail("a sliding group's page holds the KV of another prefix");
          return;
        }
      }
    }
  }

  std::vector<int32_t> read_context(const gpu::StepBatch& batch, const gpu::SequenceSlice& slice) {
    std::vector<int32_t> context(static_cast<size_t>(slice.context_len));
    uint64_t prefix = 0;
    for (int32_t position = 0; position < slice.context_len; ++position) {
      const Slot* slot = slot_at(batch, slice, position);
      if (slot == nullptr) break;
      if (slot->position != position) fail("stale KV: a slot holds another position");
      context[static_cast<size_t>(position)] = slot->token;
      prefix = extend(prefix, slot->token);
      if (slot->prefix != prefix) fail("a block's KV was computed after another prefix");
    }
    return context;
  }

  Slot* fail(const char* what) {
    if (error_.empty()) error_ = what;
    return nullptr;
  }

  FakeModelConfig config_;
  std::vector<Slot> slots_;
  std::string error_;
};

}  // namespace troupe::scheduler::testing
