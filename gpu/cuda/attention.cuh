// Paged attention for a mixed batch: every query token (prefill chunk or decode row) attends to
// keys [0, position] of its own sequence, read through the sequence's block-table row from the
// paged cache, fp16 or FP8 E4M3 read as it is stored (layout in kv_write.cuh). Causality is by position, and the chunk's own keys
// are already in the cache (kv_write runs first), so a prefill chunk attends causally to its
// cached prefix and to itself, exactly like the CPU reference (gpu/cpu/attention.hpp).
//
// GQA: one thread block per (token, KV head) computes the n_head / n_head_kv query heads that
// share it, so each K/V row is read once per group. Each warp runs an online softmax over a
// strided subset of the keys; the warps' partial results are merged at the end. head_dim must be
// 32, 64, 96, 128 or 256 (gemma3) and the group at most 8.
//
// Sliding-window layers (gemma3's, sliding_window > 0): token t sees only keys
// (positions[t] - sliding_window, positions[t]], as the CPU's LlamaConfig::first_visible_key; the
// keys below are never read, so the block-table entries the scheduler freed there (-1) are not
// either.
//
// Next steps (not done): split the keys of long contexts over several blocks (flash-decoding) so
// small decode batches fill the GPU, and tile prefill queries so a chunk reads each key once.
//
// Thread-safety: enqueues on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda/kernel_types.cuh"

namespace troupe::gpu::cuda {

struct AttentionArgs {
  const float* q = nullptr;                 // query heads of token t at q + t * ld_q (n_head * head_dim)
  int64_t ld_q = 0;
  const void* k_cache = nullptr;            // one layer, `element`s
  const void* v_cache = nullptr;
  KvElement element = KvElement::kF16;
  float k_scale = 1.0f;                     // FP8: the cache holds k / k_scale, v / v_scale
  float v_scale = 1.0f;
  const int32_t* positions = nullptr;       // [num_tokens]; token t sees keys [0, positions[t]]
  const int32_t* token_table_row = nullptr;  // [num_tokens]: its row of block_tables
  const int32_t* block_tables = nullptr;    // [rows][max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  int32_t num_tokens = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;
  float scale = 1.0f;
  int32_t sliding_window = 0;               // > 0: keys (position - sliding_window, position] only
  void* out = nullptr;                      // [num_tokens] rows of n_head * head_dim, ld_out apart
  int64_t ld_out = 0;
  ActType out_type = ActType::kF16;
  bool out_f32 = false;                     // write F32 instead of out_type (tests)
};

// Throws std::invalid_argument for an unsupported head_dim or group size.
void paged_attention(const AttentionArgs& args, cudaStream_t stream);

}  // namespace troupe::gpu::cuda
