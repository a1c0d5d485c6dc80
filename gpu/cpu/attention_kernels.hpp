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
//
// The tiled kernels (attention_tiled.hpp drives them) keep the chunk order on fp32 K/V
// converted beforehand: V (and K for the scalar/AVX2 kernels) as rows [count][head_dim] for a
// block of keys [first, first + count), whole 8-key groups readable; the AVX-512 scores read K
// as 16-key panels instead (attention_tiled_kernels.hpp).
#pragma once

#include <cstdint>

#include "gpu/cpu/attention.hpp"
#include "gpu/cpu/isa_target.hpp"

namespace troupe::gpu::cpu::detail {

inline constexpr int32_t kMaxSimdHeadDim = 256;

#if TROUPE_X86
// Pairs the 128-bit halves of a and b: [lo(a) + hi(a) | lo(b) + hi(b)].
TROUPE_TARGET_AVX2 inline __m256 fold_halves(__m256 a, __m256 b) {
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

// Results come out as [r0 r2 r4 r6 | r1 r3 r5 r7]; this puts them in order.
TROUPE_TARGET_AVX2 inline __m256 unshuffle(__m256 v) {
  return _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Eight hsum8s: r_i = ((a_i0 + a_i4) + (a_i2 + a_i6)) + ((a_i1 + a_i5) + (a_i3 + a_i7)).
TROUPE_TARGET_AVX2 inline __m256 hsum8_x8(const __m256* a) {
  const __m256 p01 = fold_halves(a[0], a[1]), p23 = fold_halves(a[2], a[3]);
  const __m256 p45 = fold_halves(a[4], a[5]), p67 = fold_halves(a[6], a[7]);
  // Per 128-bit lane, each result's (v0 + v2), (v1 + v3).
  const __m256 s = _mm256_add_ps(_mm256_shuffle_ps(p01, p23, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm256_shuffle_ps(p01, p23, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 t = _mm256_add_ps(_mm256_shuffle_ps(p45, p67, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm256_shuffle_ps(p45, p67, _MM_SHUFFLE(3, 2, 3, 2)));
  return unshuffle(_mm256_add_ps(_mm256_shuffle_ps(s, t, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(s, t, _MM_SHUFFLE(3, 1, 3, 1))));
}

// hsum8_x8's tree for sixteen 8-lane sums at once: half 2p of the input is z[p]'s low 256 bits,
// half 2p + 1 its high ones. Each half's ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) lands
// in the tree's order: lane 4L + j holds half L + 4j; callers permute it into theirs.
TROUPE_TARGET_AVX512 inline __m512 hsum8_halves_x16(const __m512* z) {
  // Four halves per register, one per 128-bit lane: (a0 + a4, a1 + a5, a2 + a6, a3 + a7).
  __m512 folded[4];
  for (int i = 0; i < 4; ++i) {
    folded[i] = _mm512_add_ps(_mm512_shuffle_f32x4(z[2 * i], z[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_f32x4(z[2 * i], z[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  // Lane L: halves L and 4 + L (s), 8 + L and 12 + L (t), each as (a0 + a4) + (a2 + a6) and
  // (a1 + a5) + (a3 + a7).
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(folded[0], folded[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(folded[0], folded[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 t = _mm512_add_ps(_mm512_shuffle_ps(folded[2], folded[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(folded[2], folded[3], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_ps(s, t, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(s, t, _MM_SHUFFLE(3, 1, 3, 1)));
}
#endif

// rows[t]: key t's head_dim fp16 values (K or V), gathered from the block table by the caller.
// q: [group][head_dim]; s and p: [group][n]; out: [group][head_dim].
void scores_chunk_avx2(const uint16_t* const* rows, int32_t n, int32_t head_dim, const float* q,
                       int32_t group, float scale, float* s);
void values_chunk_avx2(const uint16_t* const* rows, int32_t n, int32_t head_dim, const float* p,
                       int32_t group, float* out);
void values_chunk_avx512(const uint16_t* const* rows, int32_t n, int32_t head_dim,
                         const float* p, int32_t group, float* out);
void values_decode_avx2(const uint16_t* const* rows, int32_t n, int32_t head_dim, const float* p,
                        int32_t group, float* out);
// The decode kernels (a generated token's order), AVX2 and AVX-512 (head_dim % 32 == 0 for
// both): each K and V row is converted once for up to 4 query heads of the group. The score
// kernels prefetch their K rows and v_rows (the V rows of the same keys, for the value pass)
// into L2.
void scores_decode_avx2(const uint16_t* const* rows, const uint16_t* const* v_rows, int32_t n,
                        int32_t head_dim, const float* q, int32_t group, float scale, float* s);
void scores_decode_avx512(const uint16_t* const* rows, const uint16_t* const* v_rows, int32_t n,
                          int32_t head_dim, const float* q, int32_t group, float scale, float* s);
void values_decode_avx512(const uint16_t* const* rows, int32_t n, int32_t head_dim, const float* p,
                          int32_t group, float* out);
// The softmax above over s[0, n), in place.
void softmax_row_avx2(float* s, int32_t n, bool fp16_probabilities);
void softmax_row_scalar(float* s, int32_t n, bool fp16_probabilities);

// A tile's query rows and what each may see. Row r's scores and probabilities live at
// s + r * s_stride, indexed by absolute key; it attends keys [0, keys[r]).
struct TileRows {
  int32_t num_rows = 0;
  const int32_t* keys = nullptr;
  float* s = nullptr;
  int64_t s_stride = 0;
};

// The softmax above for every row of a tile, each over its own keys (bit-identical to
// softmax_row_avx2 row by row; rows interleaved so their double sums overlap).
void softmax_rows_avx512(const TileRows& rows, bool fp16_probabilities);

// dst[i] = model::fp16_to_fp32(src[i]) with F16C; n % 8 == 0 (avx2), n % 16 == 0 (avx512).
void widen_fp16_avx2(const uint16_t* src, int64_t n, float* dst);
void widen_fp16_avx512(const uint16_t* src, int64_t n, float* dst);

// Scores of every row against the block's keys it may see, in 8-key groups (a row's scores past
// its own keys, up to its row block's, are computed and never read). q is in the layout
// attention_tiled.cpp's gather_queries writes for the kernel level.
void tile_scores_scalar(const float* keys, int32_t first, int32_t count, int32_t head_dim,
                        const float* q, float scale, const TileRows& rows);
void tile_scores_avx2(const float* keys, int32_t first, int32_t count, int32_t head_dim,
                      const float* q, float scale, const TileRows& rows);

// Adds the block's keys below each row's count to its value lanes: lanes + r * 8 * head_dim is
// row r's [8][head_dim], lane j holding keys t = j mod 8 (zeroed by the caller before the first
// block).
void tile_values_scalar(const float* values, int32_t first, int32_t count, int32_t head_dim,
                        const TileRows& rows, float* lanes);
void tile_values_avx2(const float* values, int32_t first, int32_t count, int32_t head_dim,
                      const TileRows& rows, float* lanes);
void tile_values_avx512(const float* values, int32_t first, int32_t count, int32_t head_dim,
                        const TileRows& rows, float* lanes);

}  // namespace troupe::gpu::cpu::detail
