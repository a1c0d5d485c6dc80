// K-quant weights (Q4_K, Q5_K, Q6_K) against Q8_K activations, as llama.cpp's x86 CPU backend
// multiplies them (ggml-cpu/arch/x86/quants.c: quantize_row_q8_K, ggml_vec_dot_q4_K_q8_K,
// _q5_K_q8_K and _q6_K_q8_K, AVX2 forms), so a model with K-quant weights (Gemma 3 270M Q4_K_M)
// gets llama.cpp's logits bit for bit. llama.cpp runs every K-quant product through these
// per-row dots (llamafile's sgemm takes no K-quant), prompt or decode alike; a build that
// repacks Q4_K (its default "extra buffer", q4_K_8x8) sums in another order, so the reference
// data is made with repacking off (tests/reference/make_reference.py says so).
//
// Activations: per 256-element super-block, amax and the value `max` that has it (the first),
// iscale = -127 / max, q = min(127, nearest_int(iscale * x)) (round half to even), d = 1 /
// iscale, and the 16 sums of 16 consecutive q.
//
// Dot of one weight row with one activation row, per super-block b (int32 exact, then float):
//   Q4_K: lane L (0..7) = sum over sub-blocks j of sc_j * (q4 . q8 over elements 32j + 4L..+3);
//         acc[L] = fma(d_b, float(lane L), acc[L]),  d_b = y.d * fp16(x.d)
//         min lane i (0..3) = m_{2i} * S_{2i} + m_{2i+1} * S_{2i+1} (S_j: the q8 sum of
//         sub-block j); accm[i] = fma(-y.d * fp16(x.dmin), float(min lane i), accm[i])
//         result = hsum8(acc) + ((accm0 + accm2) + (accm1 + accm3))
//   Q5_K: Q4_K's lanes with a fifth code bit from qh; its min lanes summed as integers, then
//         summs = fma(-y.d * fp16(x.dmin), float(s2), summs); result = hsum8(acc) + summs
//   Q6_K: lane L = sum over 32-chunks c of sc_{2c + (L >= 4)} * (q6 . q8 over 32c + 4L..+3)
//         minus 32 * (bsum_{2L} sc_{2L} + bsum_{2L+1} sc_{2L+1});
//         acc[L] = fma(y.d * fp16(x.d), float(lane L), acc[L]); result = hsum8(acc)
// hsum8 = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) (ggml's hsum_float_8). The AVX2
// and AVX-512 kernels give the scalar ones' bits: the integer lanes are exact, so AVX-512 sums
// them with vpdpwssd two chunks at a time (Q4_K at 4-64 rows 1.3-1.6x AVX2's speed,
// matmul_bench, 2026-12-06) and shares AVX2's float side.
//
// That is llama.cpp's order for a product of fewer than 8 activation rows (a decode, a short
// prompt). From 8 rows on it takes its tiled K-quant kernel (ggml-cpu/tiled, AVX2 microtile),
// which sums each super-block's integers whole and chains the blocks differently:
//   s1 = sum of the 8 lanes above (exact), s2 (Q4_K, Q5_K) = sum of the 4 min lanes (exact)
//   res = fp16(x.d) * float(s1);  Q4_K, Q5_K: res = fma(-fp16(x.dmin), float(s2), res)
//   out = fma(res, y.d, out)   over super-blocks in order, from out = 0
// Q8KOrder picks one per activation row; the forward pass keys it on what the token is
// (gpu/cpu/forward.cpp, kquant_order), so a sequence's logits follow llama.cpp's
// sequential run whatever else shares the batch.
//
// Thread-safety: pure functions over caller-owned buffers.
#pragma once

#include <cstdint>
#include <vector>

#include "gpu/cpu/cpu_features.hpp"
#include "model/tensor_type.hpp"

namespace troupe::gpu::cpu {

inline constexpr int kQ8KBlock = 256;

// ggml's block_q8_K.
struct BlockQ8K {
  float d;
  int8_t qs[kQ8KBlock];
  int16_t bsums[kQ8KBlock / 16];
};
static_assert(sizeof(BlockQ8K) == 292);

// True for the weight types multiplied against Q8_K activations here.
inline bool uses_q8k_activations(model::TensorType type) {
  return type == model::TensorType::kQ4_K || type == model::TensorType::kQ5_K ||
         type == model::TensorType::kQ6_K;
}

// Which of llama.cpp's two K-quant orders a row gets (above).
enum class Q8KOrder : uint8_t { kVecDot = 0, kTiled = 1 };

// Quantizes n floats (a multiple of 256) into n / 256 blocks.
void quantize_row_q8k(const float* x, int64_t n, BlockQ8K* out);

// The dot of one ggml row of `type` (Q4_K, Q5_K or Q6_K, n elements) with n / 256 activation
// blocks.
float dot_q8k(model::TensorType type, const void* row, const BlockQ8K* x, int64_t n, IsaLevel isa,
              Q8KOrder order = Q8KOrder::kVecDot);

// y[r * ldy + o] for rows [0, num_rows) of x (blocks_per_row apart) and outputs
// [out_begin, out_end) of the ggml matrix w (row stride row_bytes). orders: one per row, or
// nullptr for kVecDot everywhere.
void matmul_q8k_range(model::TensorType type, const uint8_t* w, size_t row_bytes,
                      int64_t num_inputs, const BlockQ8K* x, int64_t num_rows, float* y,
                      int64_t ldy, int64_t out_begin, int64_t out_end, IsaLevel isa,
                      const Q8KOrder* orders = nullptr);

}  // namespace troupe::gpu::cpu
