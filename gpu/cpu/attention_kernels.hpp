// Internal to attention*.cpp: the SIMD forms of the attention steps, each bit-identical to its
// scalar form in attention.cpp (same operations per output, in the same order; SIMD lanes only
// hold independent accumulators or independent outputs). cpu_attention_test checks every path
// against the scalar one bit for bit.
//
//   chunk order  (a prompt token; llamafile tinyBLAS):
//     score  = hsum8(lane j: fma over dims j, j+8, ...) * scale
//     out[d] = hsum8(lane j: fma over keys t = j mod 8 of p[t] * v[t][d])
//   decode order (a generated token; ggml_vec_dot_f16, 4 accumulators x 8 lanes):
//     score  = reduce32(slot i: fma over dims i, i+32, ...) * scale
//     out[d] = reduce32(slot i: fma over keys t = i mod 32 of v[t][d] * p[t])
//   hsum8(a)    = ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7))
//   reduce32(a) = x_j = (a_j + a_16+j) + (a_8+j + a_24+j);  ((x0+x4) + (x1+x5)) + ((x2+x6) + (x3+x7))
//   softmax     = e_t = ggml_expf(s_t - max); sum in double of each 8-key block's hsum8 (zeros
//                 past n); p_t = e_t * float(1 / sum), optionally rounded to fp16.
//
// Callers check the shape conditions (head_dim % 8 for the AVX2 chunk kernels, % 32 for the
// decode scores, % 16 for the AVX-512 ones, head_dim <= kMaxSimdHeadDim for the decode values).
#pragma once

#include <cstdint>

#include "gpu/cpu/attention.hpp"

namespace troupe::gpu::cpu::detail {

inline constexpr int32_t kMaxSimdHeadDim = 256;

// rows[t]: key t's head_dim fp16 values (K or V), gathered from the block table by the caller.
// q: [group][head_dim]; s and p: [group][n]; out: [group][head_dim].
void scores_chunk_avx2(const uint16_t* const* rows, int32_t n, int32_t head_dim, const float* q,
                       int32_t group, float scale, float* s);
void scores_decode_avx2(const uint16_t* const* rows, int32_t n, int32_t head_dim, const float* q,
                        int32_t group, float scale, float* s);
void values_chunk_avx2(const uint16_t* const* rows, int32_t n, int32_t head_dim, const float* p,
                       int32_t group, float* out);
void values_chunk_avx512(const uint16_t* const* rows, int32_t n, int32_t head_dim,
                         const float* p, int32_t group, float* out);
void values_decode_avx2(const uint16_t* const* rows, int32_t n, int32_t head_dim, const float* p,
                        int32_t group, float* out);
// The softmax above over s[0, n), in place.
void softmax_row_avx2(float* s, int32_t n, bool fp16_probabilities);

}  // namespace troupe::gpu::cpu::detail
