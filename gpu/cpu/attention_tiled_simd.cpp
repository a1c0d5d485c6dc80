// AVX2 and AVX-512 kernels of the tiled prefill attention (attention_tiled.hpp), each
// bit-identical to its scalar form in attention_tiled.cpp: vector lanes hold independent
// accumulators (a score's 8 dim lanes, a value's 8 key lanes) or independent outputs, and every
// fma and add of one output happens in the scalar order.
//
// Register blocking (32 zmm / 16 ymm):
//   scores, AVX-512: 3 rows x 2 panels (32 keys, attention_tiled_kernels.hpp) x 2 dim lanes =
//                    12 fma chains, + 6 partial sums of the tree and 4 panel vectors; a zmm is
//                    one dim lane of 16 keys, so each panel vector feeds 3 rows and no
//                    horizontal sum is needed (the scores alone run at 92-94 % of the fma peak)
//   values, AVX-512: 6 rows x 64 dims = 24 accumulators for one key lane j (keys t = j mod 8),
//                    so each converted value vector feeds 6 rows
//   AVX2: 1 row x 8 keys (scores), 2 rows x 32 dims (values)
#include <algorithm>
#include <cmath>

#include "gpu/cpu/attention_kernels.hpp"
#include "gpu/cpu/attention_tiled_kernels.hpp"
#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/vec_math.hpp"

namespace troupe::gpu::cpu::detail {

#if TROUPE_X86
namespace {

// Of rows [r0, r0 + rr) within a block: every row attends the keys below end_all, some row the
// keys below end_any (the tile's tokens sit at consecutive positions: a ragged edge).
struct RowSpan {
  int32_t end_all, end_any;
};

inline RowSpan row_span(const TileRows& rows, int32_t r0, int rr, int32_t block_end) {
  int32_t lo = rows.keys[r0], hi = rows.keys[r0];
  for (int r = 1; r < rr; ++r) {
    lo = std::min(lo, rows.keys[r0 + r]);
    hi = std::max(hi, rows.keys[r0 + r]);
  }
  return {std::min(lo, block_end), std::min(hi, block_end)};
}

// Value lanes of rows [r0, r0 + Rr), dims [d0, d0 + 16 Dc): for each key lane j, the keys
// t = j mod 8 of the block in order, the accumulators held in registers across the block.
template <int Rr, int Dc>
TROUPE_TARGET_AVX512 void values_rows512(const float* values, int32_t first, int32_t count,
                                         int32_t hd, const TileRows& rows, int32_t r0, int32_t d0,
                                         float* lanes) {
  const RowSpan span = row_span(rows, r0, Rr, first + count);
  const float* p[Rr];
  for (int r = 0; r < Rr; ++r) p[r] = rows.s + (r0 + r) * rows.s_stride;
  for (int32_t j = 0; j < 8 && first + j < span.end_any; ++j) {
    __m512 acc[Rr][Dc];
    for (int r = 0; r < Rr; ++r) {
      for (int c = 0; c < Dc; ++c) {
        acc[r][c] = _mm512_load_ps(lanes + ((r0 + r) * 8 + j) * int64_t{hd} + d0 + 16 * c);
      }
    }
    int32_t t = first + j;
    for (; t < span.end_all; t += 8) {
      const float* v = values + static_cast<int64_t>(t - first) * hd + d0;
      __m512 vv[Dc];
      for (int c = 0; c < Dc; ++c) vv[c] = _mm512_load_ps(v + 16 * c);
      for (int r = 0; r < Rr; ++r) {
        const __m512 pb = _mm512_set1_ps(p[r][t]);
        for (int c = 0; c < Dc; ++c) acc[r][c] = _mm512_fmadd_ps(pb, vv[c], acc[r][c]);
      }
    }
    // Ragged tail: keys only some rows attend (the tile's tokens sit at different positions).
    for (; t < span.end_any; t += 8) {
      const float* v = values + static_cast<int64_t>(t - first) * hd + d0;
      for (int r = 0; r < Rr; ++r) {
        if (t >= rows.keys[r0 + r]) continue;
        const __m512 pb = _mm512_set1_ps(p[r][t]);
        for (int c = 0; c < Dc; ++c) {
          acc[r][c] = _mm512_fmadd_ps(pb, _mm512_load_ps(v + 16 * c), acc[r][c]);
        }
      }
    }
    for (int r = 0; r < Rr; ++r) {
      for (int c = 0; c < Dc; ++c) {
        _mm512_store_ps(lanes + ((r0 + r) * 8 + j) * int64_t{hd} + d0 + 16 * c, acc[r][c]);
      }
    }
  }
}

// For R rows x Kc panels: p[r][c] = a_j + a_j+4, where a_j is dim lane j's fma chain (dims j,
// j + 8, ... in order) of row r against the 16 keys of panel c. The two chains run side by side.
template <int R, int Kc>
TROUPE_TARGET_AVX512 inline __attribute__((always_inline)) void lane_pair512(
    const float* panel, int32_t hd, const float* q, int32_t j, __m512 (&p)[R][Kc]) {
  const int64_t panel_floats = static_cast<int64_t>(kPanelKeys) * hd;
  __m512 a[R][Kc][2];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < Kc; ++c) a[r][c][0] = a[r][c][1] = _mm512_setzero_ps();
  }
  for (int32_t d = j; d < hd; d += 8) {
    __m512 k0[Kc], k1[Kc];
    for (int c = 0; c < Kc; ++c) {
      k0[c] = _mm512_load_ps(panel + c * panel_floats + static_cast<int64_t>(d) * kPanelKeys);
      k1[c] = _mm512_load_ps(panel + c * panel_floats + static_cast<int64_t>(d + 4) * kPanelKeys);
      // Loaded once for the R rows: without this GCC folds the load into every row's fma (R
      // loads of one vector), which makes the loop load-bound.
      asm("" : "+v"(k0[c]), "+v"(k1[c]));
    }
    for (int r = 0; r < R; ++r) {
      const __m512 q0 = _mm512_set1_ps(q[static_cast<int64_t>(r) * hd + d]);
      const __m512 q1 = _mm512_set1_ps(q[static_cast<int64_t>(r) * hd + d + 4]);
      for (int c = 0; c < Kc; ++c) {
        a[r][c][0] = _mm512_fmadd_ps(q0, k0[c], a[r][c][0]);
        a[r][c][1] = _mm512_fmadd_ps(q1, k1[c], a[r][c][1]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < Kc; ++c) p[r][c] = _mm512_add_ps(a[r][c][0], a[r][c][1]);
  }
}

// Scores of R rows x Kc panels (16 Kc keys) into s (row r at s + r * stride), the panels from
// `panel` on; q: R rows of hd. The tree ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7)) is folded in
// as the lane pairs finish; its first half waits in s, so the registers hold one half's sums,
// one pair's chains and the panel vectors.
template <int R, int Kc>
TROUPE_TARGET_AVX512 inline void scores_panels512(const float* panel, int32_t hd, const float* q,
                                                  float scale, float* s, int64_t stride) {
  __m512 sum[R][Kc], p[R][Kc];
  for (int h = 0; h < 2; ++h) {  // lanes {0, 4, 2, 6}, then {1, 5, 3, 7}
    lane_pair512<R, Kc>(panel, hd, q, h, sum);
    lane_pair512<R, Kc>(panel, hd, q, h + 2, p);
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < Kc; ++c) {
        float* out = s + r * stride + c * kPanelKeys;
        const __m512 half = _mm512_add_ps(sum[r][c], p[r][c]);
        if (h == 0) {
          _mm512_store_ps(out, half);
        } else {
          _mm512_store_ps(out, _mm512_mul_ps(_mm512_add_ps(_mm512_load_ps(out), half),
                                             _mm512_set1_ps(scale)));
        }
      }
    }
  }
}

// Rows [r0, r0 + R) against the panels of keys [first, end), end rounded up to a panel.
template <int R>
TROUPE_TARGET_AVX512 void scores_rows512(const float* panels, int32_t first, int32_t end,
                                         int32_t hd, const float* q, float scale, float* s,
                                         int64_t stride) {
  int32_t t = first;
  for (; t + kPanelKeys < end; t += 2 * kPanelKeys) {
    scores_panels512<R, 2>(panels + panel_offset(t, hd) - panel_offset(first, hd), hd, q, scale,
                           s + t, stride);
  }
  if (t < end) {
    scores_panels512<R, 1>(panels + panel_offset(t, hd) - panel_offset(first, hd), hd, q, scale,
                           s + t, stride);
  }
}

template <int Dc>
TROUPE_TARGET_AVX512 void values_block512(const float* values, int32_t first, int32_t count,
                                          int32_t hd, const TileRows& rows, int32_t r0, int32_t rr,
                                          int32_t d0, float* lanes) {
  switch (rr) {
    case 1: return values_rows512<1, Dc>(values, first, count, hd, rows, r0, d0, lanes);
    case 2: return values_rows512<2, Dc>(values, first, count, hd, rows, r0, d0, lanes);
    case 3: return values_rows512<3, Dc>(values, first, count, hd, rows, r0, d0, lanes);
    case 4: return values_rows512<4, Dc>(values, first, count, hd, rows, r0, d0, lanes);
    case 5: return values_rows512<5, Dc>(values, first, count, hd, rows, r0, d0, lanes);
    default: return values_rows512<6, Dc>(values, first, count, hd, rows, r0, d0, lanes);
  }
}

// The AVX2 form of values_rows512: 8-dim vectors, up to 2 rows x 4 vectors.
template <int Rr, int Dc>
TROUPE_TARGET_AVX2 void values_rows256(const float* values, int32_t first, int32_t count,
                                       int32_t hd, const TileRows& rows, int32_t r0, int32_t d0,
                                       float* lanes) {
  const RowSpan span = row_span(rows, r0, Rr, first + count);
  for (int32_t j = 0; j < 8 && first + j < span.end_any; ++j) {
    __m256 acc[Rr][Dc];
    for (int r = 0; r < Rr; ++r) {
      for (int c = 0; c < Dc; ++c) {
        acc[r][c] = _mm256_load_ps(lanes + ((r0 + r) * 8 + j) * int64_t{hd} + d0 + 8 * c);
      }
    }
    for (int32_t t = first + j; t < span.end_any; t += 8) {
      const float* v = values + static_cast<int64_t>(t - first) * hd + d0;
      __m256 vv[Dc];
      for (int c = 0; c < Dc; ++c) vv[c] = _mm256_load_ps(v + 8 * c);
      for (int r = 0; r < Rr; ++r) {
        if (t >= rows.keys[r0 + r]) continue;  // the ragged tail
        const __m256 pb = _mm256_set1_ps(rows.s[(r0 + r) * rows.s_stride + t]);
        for (int c = 0; c < Dc; ++c) acc[r][c] = _mm256_fmadd_ps(pb, vv[c], acc[r][c]);
      }
    }
    for (int r = 0; r < Rr; ++r) {
      for (int c = 0; c < Dc; ++c) {
        _mm256_store_ps(lanes + ((r0 + r) * 8 + j) * int64_t{hd} + d0 + 8 * c, acc[r][c]);
      }
    }
  }
}

template <int Rr>
TROUPE_TARGET_AVX2 void values_dims256(const float* values, int32_t first, int32_t count,
                                       int32_t hd, const TileRows& rows, int32_t r0, float* lanes) {
  int32_t d0 = 0;
  for (; d0 + 32 <= hd; d0 += 32) {
    values_rows256<Rr, 4>(values, first, count, hd, rows, r0, d0, lanes);
  }
  for (; d0 < hd; d0 += 8) values_rows256<Rr, 1>(values, first, count, hd, rows, r0, d0, lanes);
}

}  // namespace

TROUPE_TARGET_AVX2 void widen_fp16_avx2(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
}

TROUPE_TARGET_AVX512 void widen_fp16_avx512(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; i += 16) {
    _mm512_storeu_ps(
        dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
}

namespace {

// r[i] holds row i on entry and column i on return: four rounds of shuffles between register
// pairs, which interleave 1-float, 2-float, 4-float and then 8-float groups.
TROUPE_TARGET_AVX512 inline void transpose16x16(__m512 (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int h = 0; h < 16; h += 8) {
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xDD);
    }
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
  }
}

}  // namespace

TROUPE_TARGET_AVX512 void widen_panel_avx512(const uint16_t* keys, int32_t hd, float* panel) {
  for (int32_t d0 = 0; d0 < hd; d0 += kPanelKeys) {
    __m512 r[16];
    for (int i = 0; i < 16; ++i) {
      r[i] = _mm512_cvtph_ps(_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(keys + static_cast<int64_t>(i) * hd + d0)));
    }
    transpose16x16(r);
    for (int i = 0; i < 16; ++i) _mm512_storeu_ps(panel + (d0 + i) * kPanelKeys, r[i]);
  }
}

namespace {

// One row of softmax_rows_avx512.
struct SoftmaxRow {
  float* s;
  int32_t n;
  __m512 max;
  double sum;
};

TROUPE_TARGET_AVX512 inline __mmask16 first_lanes(int32_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << count) - 1);
}

// The maximum is order-free (scores are finite; +0 and -0 give the same exponentials).
TROUPE_TARGET_AVX512 inline __m512 row_max(const float* s, int32_t n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  int32_t t = 0;
  for (; t + 16 <= n; t += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(s + t));
  if (t < n) {
    const __mmask16 k = first_lanes(n - t);
    m = _mm512_mask_max_ps(m, k, _mm512_maskz_loadu_ps(k, s + t), m);
  }
  return _mm512_set1_ps(_mm512_reduce_max_ps(m));
}

// e = ggml_expf(s - max) of keys [t, t + 16) (lanes past n: 0), stored; then the hsum8s of its
// two 8-key blocks added to the double sum one after the other (a block wholly past n adds
// +0, which leaves the positive sum as it is).
TROUPE_TARGET_AVX512 inline void exp_tail(SoftmaxRow& row, int32_t t) {
  const __mmask16 k = first_lanes(row.n - t);
  __m512 e = ggml_expf512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row.s + t), row.max));
  e = _mm512_maskz_mov_ps(k, e);
  _mm512_mask_storeu_ps(row.s + t, k, e);
  __m512 h = _mm512_add_ps(e, _mm512_shuffle_f32x4(e, e, _MM_SHUFFLE(2, 3, 0, 1)));
  h = _mm512_add_ps(h, _mm512_permute_ps(h, _MM_SHUFFLE(1, 0, 3, 2)));
  h = _mm512_add_ps(h, _mm512_permute_ps(h, _MM_SHUFFLE(2, 3, 0, 1)));
  row.sum += static_cast<double>(_mm512_cvtss_f32(h));
  row.sum += static_cast<double>(_mm_cvtss_f32(_mm512_extractf32x4_ps(h, 2)));
}

TROUPE_TARGET_AVX512 inline void normalize(const SoftmaxRow& row, bool fp16_probabilities) {
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / row.sum));
  int32_t t = 0;
  for (; t + 16 <= row.n; t += 16) {
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(row.s + t), inv);
    if (fp16_probabilities) v = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    _mm512_storeu_ps(row.s + t, v);
  }
  if (t < row.n) {
    const __mmask16 k = first_lanes(row.n - t);
    __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, row.s + t), inv);
    if (fp16_probabilities) v = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    _mm512_mask_storeu_ps(row.s + t, k, v);
  }
}

// z[r]: 16 exponentials of row r (r < 8), two 8-key blocks. Returns the blocks' hsum8s as
// [lo blocks of rows 0..7 | hi blocks of rows 0..7], each ((a0+a4) + (a2+a6)) + ((a1+a5) +
// (a3+a7)): the scalar adds, done for 16 blocks at once across the registers.
TROUPE_TARGET_AVX512 inline __m512 block_sums_x8(const __m512* z) {
  // The tree gives half L + 4j at lane 4L + j; row r's lo block is half 2r, its hi block 2r + 1.
  const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  return _mm512_permutexvar_ps(order, hsum8_halves_x16(z));
}

// softmax_row_avx2's operations on 16 lanes for G <= 8 rows at once. Over the keys every row
// holds, the rows' double sums sit in one register (lane r: row r) and take each 16-key chunk's
// two block sums with two vertical adds; each row's ragged tail (its keys past the common ones)
// then continues its own sum.
template <int G>
TROUPE_TARGET_AVX512 void softmax_group512(const TileRows& rows, int32_t r0,
                                           bool fp16_probabilities) {
  SoftmaxRow row[G];
  int32_t common = rows.keys[r0];
  for (int i = 0; i < G; ++i) {
    float* s = rows.s + (r0 + i) * rows.s_stride;
    const int32_t n = rows.keys[r0 + i];
    row[i] = {s, n, row_max(s, n), 0.0};
    common = std::min(common, n);
  }
  common = common / 16 * 16;
  __m512d sums = _mm512_setzero_pd();  // +0 + x = x: the same as starting the chain at x
  for (int32_t t = 0; t < common; t += 16) {
    __m512 z[8];
    for (int i = 0; i < 8; ++i) {
      if (i >= G) {
        z[i] = _mm512_setzero_ps();
        continue;
      }
      z[i] = ggml_expf512(_mm512_sub_ps(_mm512_loadu_ps(row[i].s + t), row[i].max));
      _mm512_storeu_ps(row[i].s + t, z[i]);
    }
    const __m512 b = block_sums_x8(z);
    sums = _mm512_add_pd(sums, _mm512_cvtps_pd(_mm512_castps512_ps256(b)));
    sums = _mm512_add_pd(sums, _mm512_cvtps_pd(_mm512_extractf32x8_ps(b, 1)));
  }
  alignas(64) double lane_sums[8];
  _mm512_store_pd(lane_sums, sums);
  for (int i = 0; i < G; ++i) {
    row[i].sum = lane_sums[i];
    for (int32_t t = common; t < row[i].n; t += 16) exp_tail(row[i], t);
    normalize(row[i], fp16_probabilities);
  }
}

}  // namespace

TROUPE_TARGET_AVX512 void softmax_rows_avx512(const TileRows& rows, bool fp16_probabilities) {
  int32_t r0 = 0;
  for (; r0 + 8 <= rows.num_rows; r0 += 8) softmax_group512<8>(rows, r0, fp16_probabilities);
  switch (rows.num_rows - r0) {
    case 1: return softmax_group512<1>(rows, r0, fp16_probabilities);
    case 2: return softmax_group512<2>(rows, r0, fp16_probabilities);
    case 3: return softmax_group512<3>(rows, r0, fp16_probabilities);
    case 4: return softmax_group512<4>(rows, r0, fp16_probabilities);
    case 5: return softmax_group512<5>(rows, r0, fp16_probabilities);
    case 6: return softmax_group512<6>(rows, r0, fp16_probabilities);
    case 7: return softmax_group512<7>(rows, r0, fp16_probabilities);
    default: return;
  }
}

TROUPE_TARGET_AVX2 void tile_scores_avx2(const float* keys, int32_t first, int32_t count,
                                         int32_t hd, const float* q, float scale,
                                         const TileRows& rows) {
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int32_t r = 0; r < rows.num_rows; ++r) {
    const float* qr = q + static_cast<int64_t>(r) * hd;
    float* s = rows.s + r * rows.s_stride;
    const int32_t end = std::min(first + count, rows.keys[r]);
    for (int32_t t0 = first; t0 < end; t0 += 8) {
      const float* k = keys + static_cast<int64_t>(t0 - first) * hd;
      __m256 acc[8];
      for (auto& a : acc) a = _mm256_setzero_ps();
      for (int32_t d = 0; d < hd; d += 8) {
        const __m256 qv = _mm256_load_ps(qr + d);
        for (int i = 0; i < 8; ++i) {
          acc[i] = _mm256_fmadd_ps(qv, _mm256_load_ps(k + i * hd + d), acc[i]);
        }
      }
      _mm256_store_ps(s + t0, _mm256_mul_ps(hsum8_x8(acc), vscale));
    }
  }
}

TROUPE_TARGET_AVX512 void tile_scores_panels_avx512(const float* panels, int32_t first,
                                                    int32_t count, int32_t hd, const float* q,
                                                    float scale, const TileRows& rows) {
  constexpr int kRows = 3;  // x 2 panels: 12 accumulator pairs, 24 fma chains in flight
  for (int32_t r0 = 0; r0 < rows.num_rows; r0 += kRows) {
    const int32_t rr = std::min(kRows, rows.num_rows - r0);
    const int32_t end = row_span(rows, r0, rr, first + count).end_any;
    const float* qr = q + static_cast<int64_t>(r0) * hd;
    float* s = rows.s + r0 * rows.s_stride;
    switch (rr) {
      case 1: scores_rows512<1>(panels, first, end, hd, qr, scale, s, rows.s_stride); break;
      case 2: scores_rows512<2>(panels, first, end, hd, qr, scale, s, rows.s_stride); break;
      default: scores_rows512<kRows>(panels, first, end, hd, qr, scale, s, rows.s_stride); break;
    }
  }
}

TROUPE_TARGET_AVX2 void tile_values_avx2(const float* values, int32_t first, int32_t count,
                                         int32_t hd, const TileRows& rows, float* lanes) {
  int32_t r0 = 0;
  for (; r0 + 2 <= rows.num_rows; r0 += 2) {
    values_dims256<2>(values, first, count, hd, rows, r0, lanes);
  }
  if (r0 < rows.num_rows) values_dims256<1>(values, first, count, hd, rows, r0, lanes);
}

TROUPE_TARGET_AVX512 void tile_values_avx512(const float* values, int32_t first, int32_t count,
                                             int32_t hd, const TileRows& rows, float* lanes) {
  for (int32_t r0 = 0; r0 < rows.num_rows; r0 += 6) {
    const int32_t rr = std::min(6, rows.num_rows - r0);
    int32_t d0 = 0;
    for (; d0 + 64 <= hd; d0 += 64) {
      values_block512<4>(values, first, count, hd, rows, r0, rr, d0, lanes);
    }
    for (; d0 < hd; d0 += 16) values_block512<1>(values, first, count, hd, rows, r0, rr, d0, lanes);
  }
}

#else
void widen_fp16_avx2(const uint16_t*, int64_t, float*) {}
void widen_fp16_avx512(const uint16_t*, int64_t, float*) {}
void widen_panel_avx512(const uint16_t*, int32_t, float*) {}
void softmax_rows_avx512(const TileRows&, bool) {}
void tile_scores_avx2(const float*, int32_t, int32_t, int32_t, const float*, float,
                      const TileRows&) {}
void tile_scores_panels_avx512(const float*, int32_t, int32_t, int32_t, const float*, float,
                               const TileRows&) {}
void tile_values_avx2(const float*, int32_t, int32_t, int32_t, const TileRows&, float*) {}
void tile_values_avx512(const float*, int32_t, int32_t, int32_t, const TileRows&, float*) {}
#endif

}  // namespace troupe::gpu::cpu::detail
