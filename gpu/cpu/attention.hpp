// Paged attention: one query token attends to keys [0, num_keys) of its sequence, read through
// the sequence's block table from fp16 KV blocks (a q8_0 cache: attention_q8.hpp).
//
//   KV layout of one layer:  block b -> [num_kv_heads][block_size][head_dim] fp16, K and V apart
//   key position t lives in block block_table[t / block_size], slot t % block_size
//
// A work item is (query token, KV head): the group of num_heads / num_kv_heads query heads that
// share the KV head (GQA) is done together so each K/V row is converted once. Causality is by
// position: a token at position p passes num_keys = p + 1, and keys of a prefill chunk are in
// the blocks (written before attention runs) like any cached prefix, so a token's result does not
// depend on how its prompt was chunked or what else is in the batch. The forward pass runs prompt
// (chunk-order) tokens through attention_tiled.hpp instead, which gives the same bits while
// converting each K/V row once per tile of tokens rather than once per token.
//
// Thread-safety: pure functions over caller-owned buffers; items touch disjoint outputs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/cpu/cpu_features.hpp"
#include "gpu/kv_dtype.hpp"

namespace troupe::gpu::cpu {

// [num_blocks][num_kv_heads][block_size] rows of row_words() 16-bit words: head_dim fp16 values,
// or (dtype q8_0, attention_q8.hpp) head_dim / 32 ggml q8_0 blocks of 17 words.
struct KvLayerView {
  uint16_t* k = nullptr;
  uint16_t* v = nullptr;
  int32_t num_blocks = 0;
  int32_t block_size = 16;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  KvDtype dtype = KvDtype::kF16;

  size_t row_words() const { return static_cast<size_t>(kv_row_bytes(dtype, head_dim) / 2); }
  size_t block_elements() const {
    return static_cast<size_t>(num_kv_heads) * block_size * row_words();
  }
  size_t offset(int32_t block, int32_t kv_head, int32_t slot) const {
    return static_cast<size_t>(block) * block_elements() +
           (static_cast<size_t>(kv_head) * block_size + slot) * row_words();
  }
};

// Stores one token's K and V ([num_kv_heads][head_dim] floats each) at (block, slot), as fp16.
// Every isa stores the same bits.
void kv_store(const KvLayerView& kv, int32_t block, int32_t slot, const float* k, const float* v,
              IsaLevel isa = IsaLevel::kScalar);

// q: [group][head_dim] (the query heads of kv_head); out: [group][head_dim].
// scratch: at least group * num_keys floats. fp16_probabilities: normalize the softmax and round
// it to fp16 before weighting V, as ggml's non-flash attention does (its KQ·V product takes the
// probabilities in V's fp16 type); the model forward uses it to track llama.cpp's logits.
// Reduction orders follow llama.cpp on x86 (AVX2 build): a prompt token (llama.cpp computes a
// prompt in one batch) gets llamafile sgemm's order (8 lanes, hsum); single_token (a generated
// token, which llama.cpp decodes alone) gets ggml_vec_dot_f16's (4 x 8 lanes), since llamafile
// declines n < 2. The caller decides per token (forward.cpp: uses_decode_order).
// first_key > 0 (a sliding-window layer) masks keys [0, first_key) as llama.cpp's mask does:
// their scores become -inf, so their probabilities are exactly 0 and every sum keeps the lane
// and block order of the unmasked product (the same bits as llama.cpp with its -inf mask).
void attention_group(const KvLayerView& kv, const int32_t* block_table, int32_t num_keys,
                     int32_t kv_head, const float* q, int32_t group, float scale, float* out,
                     float* scratch, IsaLevel isa, bool fp16_probabilities = false,
                     bool single_token = false, int32_t first_key = 0);

// Sets scores [0, first_key) of `rows` rows (stride apart) to -inf: the sliding-window mask.
void mask_keys_before(float* scores, int64_t stride, int32_t rows, int32_t first_key);

// Double-precision reference with the same inputs (keys [first_key, num_keys)).
void attention_group_reference(const KvLayerView& kv, const int32_t* block_table,
                               int32_t num_keys, int32_t kv_head, const float* q, int32_t group,
                               float scale, float* out, int32_t first_key = 0);

}  // namespace troupe::gpu::cpu
