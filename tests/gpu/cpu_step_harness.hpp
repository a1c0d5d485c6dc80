// A tiny stand-in for the scheduler in CPU backend tests: owns sequences (token lists, KV block
// tables from a caller-chosen block order) and builds StepBatches of prefill chunks and decode
// tokens. With KV groups (set_kv_groups, gpu/kv_groups.hpp) every sequence holds one table per
// group, and the sliding groups' pages that fall out of the window are freed after each step and
// handed to the next allocation, as the KV-cache manager does: a backend that read a freed page
// would read another sequence's keys.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <numeric>
#include <vector>

#include "gpu/step.hpp"

namespace troupe::gpu::cpu::testing {

class StepHarness {
 public:
  // Blocks are handed out in `block_order` (default 0, 1, 2, ...).
  StepHarness(int32_t num_blocks, int32_t block_size, std::vector<int32_t> block_order = {})
      : block_size_(block_size), free_(std::move(block_order)) {
    if (free_.empty()) {
      free_.resize(num_blocks);
      std::iota(free_.begin(), free_.end(), 0);
    }
  }

  struct Seq {
    std::vector<int32_t> tokens;  // all tokens known (prompt + generated)
    int32_t num_prompt = 0;       // leading tokens that are the prompt
    int32_t computed = 0;         // tokens whose KV is in the blocks
    std::vector<int32_t> blocks;
    std::vector<std::vector<int32_t>> sliding_blocks;  // groups 1.., -1 where freed
    model::SamplingParams params;
    int32_t num_generated = 0;
  };

  // `tokens` may already hold generated tokens (a sequence recomputed after preemption):
  // num_prompt says where its prompt ends (-1: all of it is prompt).
  void add(uint64_t id, std::vector<int32_t> tokens, model::SamplingParams params = greedy(),
           int32_t num_prompt = -1) {
    Seq s;
    s.num_prompt = num_prompt < 0 ? static_cast<int32_t>(tokens.size()) : num_prompt;
    s.num_generated = static_cast<int32_t>(tokens.size()) - s.num_prompt;
    s.tokens = std::move(tokens);
    s.params = params;
    seqs_[id] = std::move(s);
  }
  Seq& seq(uint64_t id) { return seqs_.at(id); }

  // The backend's KV groups (KvCacheGeometry): num_groups tables per sequence.
  void set_kv_groups(int32_t num_groups, int32_t sliding_window) {
    num_groups_ = num_groups;
    sliding_window_ = sliding_window;
  }
  // Pages held now (every group), and what holding every page taken would be (no freeing).
  int32_t pages_in_use() const { return in_use_; }
  int32_t pages_taken() const { return taken_; }

  static model::SamplingParams greedy() {
    model::SamplingParams p;
    p.temperature = 0.0f;
    return p;
  }

  // One step: for each (id, n) computes the next n not-yet-computed tokens of that sequence; a
  // sequence samples when the step reaches its last known token.
  StepBatch build(const std::vector<std::pair<uint64_t, int32_t>>& work) {
    StepBatch b;
    b.step_id = next_step_++;
    int32_t max_blocks = 0;
    for (const auto& [id, n] : work) {
      Seq& s = seqs_.at(id);
      const int32_t ctx = s.computed + n;
      s.sliding_blocks.resize(static_cast<size_t>(num_groups_ - 1));
      while (static_cast<int32_t>(s.blocks.size()) * block_size_ < ctx) {
        s.blocks.push_back(take());
        for (auto& g : s.sliding_blocks) g.push_back(take());
      }
      max_blocks = std::max(max_blocks, static_cast<int32_t>(s.blocks.size()));
    }
    b.max_blocks_per_seq = max_blocks;
    b.num_kv_groups = num_groups_;
    std::vector<int32_t> group_rows;  // groups 1..: [group - 1][seq][max_blocks]
    for (const auto& [id, n] : work) {
      Seq& s = seqs_.at(id);
      SequenceSlice slice;
      slice.seq_id = id;
      slice.token_offset = b.num_tokens();
      slice.num_tokens = n;
      slice.context_len = s.computed + n;
      slice.block_table_row = static_cast<int32_t>(b.seqs.size());
      slice.num_prompt_tokens = s.num_prompt;
      for (int32_t i = 0; i < n; ++i) {
        b.token_ids.push_back(s.tokens.at(s.computed + i));
        b.positions.push_back(s.computed + i);
      }
      std::vector<int32_t> row = s.blocks;
      row.resize(max_blocks, -1);
      b.block_tables.insert(b.block_tables.end(), row.begin(), row.end());
      for (const auto& g : s.sliding_blocks) {
        std::vector<int32_t> sliding_row = g;
        sliding_row.resize(max_blocks, -1);
        group_rows.insert(group_rows.end(), sliding_row.begin(), sliding_row.end());
      }
      slice.sample = slice.context_len == static_cast<int32_t>(s.tokens.size());
      if (slice.sample) {
        SamplingSlot slot;
        slot.params = s.params;
        slot.num_generated = s.num_generated;
        slot.recent_offset = static_cast<int32_t>(b.recent_tokens.size());
        slot.recent_count = static_cast<int32_t>(s.tokens.size());
        b.recent_tokens.insert(b.recent_tokens.end(), s.tokens.begin(), s.tokens.end());
        slice.sampling_index = static_cast<int32_t>(b.sampling.size());
        b.sampling.push_back(slot);
      }
      b.seqs.push_back(slice);
      s.computed += n;
    }
    // group_rows is [seq][group - 1][...]: reorder to [group][seq][...] after group 0.
    const size_t num_seqs = b.seqs.size(), width = static_cast<size_t>(max_blocks);
    for (int32_t g = 1; g < num_groups_; ++g) {
      for (size_t q = 0; q < num_seqs; ++q) {
        const auto from = group_rows.begin() +
                          static_cast<std::ptrdiff_t>((q * (num_groups_ - 1) + (g - 1)) * width);
        b.block_tables.insert(b.block_tables.end(), from, from + static_cast<std::ptrdiff_t>(width));
      }
    }
    return b;
  }

  // After a step: frees the sliding groups' pages no later query can see (every position in
  // the page before the next token's window). Call between steps when using KV groups.
  void release_out_of_window() {
    if (num_groups_ == 1 || sliding_window_ <= 0) return;
    for (auto& [id, s] : seqs_) {
      const int32_t first_needed = std::max(0, s.computed + 1 - sliding_window_);
      for (auto& g : s.sliding_blocks) {
        for (int32_t i = 0; i < static_cast<int32_t>(g.size()) && (i + 1) * block_size_ <= first_needed; ++i) {
          if (g[i] < 0) continue;
          recycled_.push_back(g[i]);
          g[i] = -1;
          --in_use_;
        }
      }
    }
  }

  // Appends sampled tokens to their sequences.
  void accept(const StepResult& r) {
    for (const SampledToken& t : r.tokens) {
      Seq& s = seqs_.at(t.seq_id);
      s.tokens.push_back(t.token_id);
      s.num_generated++;
    }
    release_out_of_window();
  }

 private:
  int32_t take() {
    ++in_use_;
    ++taken_;
    if (!recycled_.empty()) {
      const int32_t page = recycled_.back();
      recycled_.pop_back();
      return page;
    }
    return free_.at(next_free_++);
  }

  int32_t block_size_;
  std::vector<int32_t> free_;
  std::vector<int32_t> recycled_;  // freed out-of-window pages, reused first
  size_t next_free_ = 0;
  int32_t num_groups_ = 1;
  int32_t sliding_window_ = 0;
  int32_t in_use_ = 0, taken_ = 0;
  std::map<uint64_t, Seq> seqs_;
  uint64_t next_step_ = 1;
};

}  // namespace troupe::gpu::cpu::testing
