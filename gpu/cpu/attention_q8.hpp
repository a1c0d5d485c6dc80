// Attention over a q8_0 KV cache (cache.kv_dtype q8_0, gpu/kv_dtype.hpp), computed as llama.cpp's
// CPU flash attention computes it for a quantized cache (`-ctk q8_0 -ctv q8_0 -fa on`; llama.cpp
// runs a quantized V only there): ggml_compute_forward_flash_attn_ext_f16_one_chunk, which its
// x86 build takes for every query row, prompt or generated, when K is not f16/f32.
//
//   store:  each K and V row (token, KV head) -> q8_0 blocks by ggml's x86 quantize_row_q8_0:
//           amax of the 32 values, d = fp16(amax / 127), q = round-half-even(x * (127 / amax))
//   query:  each query head's f32 row (not rounded to fp16) -> q8_0 blocks the same way
//   keys:   for key t in [first visible, position]:
//             s = ggml_vec_dot_q8_0_q8_0(K_t, Q) * scale   (AVX2 order: lane j of 8 holds
//                 fma(d_K * d_Q, float(sum of the 4 products 4j..4j+3), lane), then hsum8)
//             if s > M: ms = expf(M - s), M = s, acc *= ms; else vs = expf(s - M)
//             acc += float(V_t) * vs   (fma per value)      S = fma(S, ms, vs)
//   out  =  acc * (1 / S)
//
// expf is libm's (what ggml calls there). The per-row sequence is that of llama.cpp, so rows can
// be tiled freely: a run of a sequence's consecutive tokens shares each K/V row's loads and V's
// dequantization, every row keeping its own order. The SIMD forms are bit-identical to the
// scalar twin (cpu_attention_q8_test).
//
// Thread-safety: pure functions over caller-owned buffers; calls touch disjoint outputs.
#pragma once

#include <cstdint>
#include <vector>

#include "gpu/cpu/attention.hpp"
#include "gpu/cpu/cpu_features.hpp"
#include "model/quants/q4_q8.hpp"

namespace troupe::gpu::cpu {

using model::quants::BlockQ8_0;

// x[0, n) (n % 32 == 0) as q8_0 blocks, as ggml's x86 quantize_row_q8_0; every isa gives the
// same bytes.
void quantize_q8_0(const float* x, int32_t n, BlockQ8_0* out, IsaLevel isa = IsaLevel::kScalar);

// ggml_vec_dot_q8_0_q8_0 over `blocks` blocks, in its AVX2 order (every isa: the same bits).
float dot_q8_0(const BlockQ8_0* x, const BlockQ8_0* y, int32_t blocks,
               IsaLevel isa = IsaLevel::kScalar);

// Stores one token's K and V ([num_kv_heads][head_dim] floats each) at (block, slot) of a q8_0
// layer (kv.dtype == KvDtype::kQ8_0).
void kv_store_q8_0(const KvLayerView& kv, int32_t block, int32_t slot, const float* k,
                   const float* v, IsaLevel isa = IsaLevel::kScalar);

// Query rows for one call: num_rows consecutive tokens of one sequence (row r at position
// first_position + r sees keys [max(0, p + 1 - window) when window > 0 else 0, p]), each with
// num_heads query heads of the KV head, head_dim apart from q + r * q_stride; results to
// out + r * out_stride the same way.
struct Q8AttentionRows {
  int32_t first_position = 0;
  int32_t num_rows = 1;
  int32_t window = 0;
  int32_t num_heads = 1;
  const float* q = nullptr;
  int64_t q_stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  float scale = 1.0f;
};

// Per-thread buffers, grown to the largest call seen.
struct Q8AttentionScratch {
  std::vector<BlockQ8_0> q;    // [rows * heads][blocks]
  std::vector<float> state;    // [rows * heads][2 + head_dim]: M, S, accumulator
  std::vector<float> scores;   // a call's items over one chunk: scores, ms and vs factors
  std::vector<float> values;   // [kKeyChunk][head_dim]: the chunk's V rows dequantized
};

void attention_q8_0(const KvLayerView& kv, const int32_t* block_table, int32_t kv_head,
                    const Q8AttentionRows& rows, Q8AttentionScratch& scratch, IsaLevel isa);

}  // namespace troupe::gpu::cpu
