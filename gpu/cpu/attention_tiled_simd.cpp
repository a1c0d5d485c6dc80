// AVX2 and AVX-512 kernels of the tiled prefill attention (attention_tiled.hpp), each
// bit-identical to its scalar form in attention_tiled.cpp: vector lanes hold independent
// accumulators (a score's 8 dim lanes, a value's 8 key lanes) or independent outputs, and every
// fma and add of one output happens in the scalar order.
//
// Register blocking (32 zmm / 16 ymm):
//   scores, AVX-512: 3 row pairs x 8 keys = 24 accumulators; a zmm is [row 2i | row 2i+1] x the
//                    8 dim lanes of one key, so one broadcast key chunk feeds 2 rows per fma
//   values, AVX-512: 6 rows x 64 dims = 24 accumulators for one key lane j (keys t = j mod 8),
//                    so each converted value vector feeds 6 rows
//   AVX2: 1 row x 8 keys (scores), 2 rows x 32 dims (values)
#include <algorithm>
#include <cmath>

#include "gpu/cpu/attention_kernels.hpp"
#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/vec_math.hpp"

namespace troupe::gpu::cpu::detail {

#if TROUPE_X86
namespace {

// Sixteen hsum8s at once: z[i] = [row a: key i's 8 lanes | row b: key i's 8 lanes] for keys
// 0..7; returns [a's 8 results | b's 8 results], each ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)).
TROUPE_TARGET_AVX512 inline __m512 hsum8_x16(const __m512* z) {
  // Per 128-bit block: [v0 v1 v2 v3] = lo + hi of one (row, key): blocks a_i, b_i, a_i+1, b_i+1.
  __m512 w[4];
  for (int i = 0; i < 4; ++i) {
    w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(z[2 * i], z[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(z[2 * i], z[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  // Per block: [x y x' y'] with x = v0 + v2, y = v1 + v3 of two (row, key)s.
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 t = _mm512_add_ps(_mm512_shuffle_ps(w[2], w[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(w[2], w[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // x + y: blocks [a0 a2 a4 a6], [b0 b2 b4 b6], [a1 a3 a5 a7], [b1 b3 b5 b7].
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(s, t, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(s, t, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  return _mm512_permutexvar_ps(order, r);
}

// Scores of Rp row pairs against keys [first, end) in 8-key groups. qp: the first pair's
// interleaved queries; s: the first pair's first row.
template <int Rp>
TROUPE_TARGET_AVX512 void scores_pairs512(const float* keys, int32_t first, int32_t end, int32_t hd,
                                          const float* qp, float scale, float* s, int64_t stride) {
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int32_t t0 = first; t0 < end; t0 += 8) {
    const float* k = keys + static_cast<int64_t>(t0 - first) * hd;
    __m512 acc[Rp][8];
    for (auto& row : acc) {
      for (auto& a : row) a = _mm512_setzero_ps();
    }
    for (int32_t c = 0; c < hd / 8; ++c) {
      __m512 qv[Rp];
      for (int p = 0; p < Rp; ++p) {
        qv[p] = _mm512_load_ps(qp + static_cast<int64_t>(p) * 2 * hd + 16 * c);
      }
      for (int i = 0; i < 8; ++i) {
        const __m512 kv =
            _mm512_broadcast_f32x8(_mm256_load_ps(k + static_cast<int64_t>(i) * hd + 8 * c));
        for (int p = 0; p < Rp; ++p) acc[p][i] = _mm512_fmadd_ps(qv[p], kv, acc[p][i]);
      }
    }
    for (int p = 0; p < Rp; ++p) {
      const __m512 r = _mm512_mul_ps(hsum8_x16(acc[p]), vscale);
      _mm256_store_ps(s + 2 * p * stride + t0, _mm512_castps512_ps256(r));
      _mm256_store_ps(s + (2 * p + 1) * stride + t0, _mm512_extractf32x8_ps(r, 1));
    }
  }
}

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
  for (int32_t t = 0; t < n; t += 16) {
    const __mmask16 k = first_lanes(n - t);
    m = _mm512_mask_max_ps(m, k, _mm512_maskz_loadu_ps(k, s + t), m);
  }
  return _mm512_set1_ps(_mm512_reduce_max_ps(m));
}

// e = ggml_expf(s - max) of keys [t, t + 16) (lanes past n: 0), stored; then the hsum8s of its
// two 8-key blocks added to the double sum one after the other (a block wholly past n adds
// +0, which leaves the positive sum as it is).
template <bool kTail>
TROUPE_TARGET_AVX512 inline void exp_chunk(SoftmaxRow& row, int32_t t) {
  const __mmask16 k = kTail ? first_lanes(row.n - t) : static_cast<__mmask16>(0xFFFF);
  __m512 e = ggml_expf512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row.s + t), row.max));
  if (kTail) e = _mm512_maskz_mov_ps(k, e);
  _mm512_mask_storeu_ps(row.s + t, k, e);
  __m512 h = _mm512_add_ps(e, _mm512_shuffle_f32x4(e, e, _MM_SHUFFLE(2, 3, 0, 1)));
  h = _mm512_add_ps(h, _mm512_permute_ps(h, _MM_SHUFFLE(1, 0, 3, 2)));
  h = _mm512_add_ps(h, _mm512_permute_ps(h, _MM_SHUFFLE(2, 3, 0, 1)));
  row.sum += static_cast<double>(_mm512_cvtss_f32(h));
  row.sum += static_cast<double>(_mm_cvtss_f32(_mm512_extractf32x4_ps(h, 2)));
}

TROUPE_TARGET_AVX512 inline void normalize(const SoftmaxRow& row, bool fp16_probabilities) {
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / row.sum));
  for (int32_t t = 0; t < row.n; t += 16) {
    const __mmask16 k = first_lanes(row.n - t);
    __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, row.s + t), inv);
    if (fp16_probabilities) v = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    _mm512_mask_storeu_ps(row.s + t, k, v);
  }
}

// softmax_row_avx2's operations on 16 lanes for G rows at once: each row's double sum is a
// chain of dependent adds, so the rows take turns chunk by chunk and their chains overlap.
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
  for (int32_t t = 0; t < common; t += 16) {
    for (int i = 0; i < G; ++i) exp_chunk<false>(row[i], t);
  }
  for (int i = 0; i < G; ++i) {
    for (int32_t t = common; t < row[i].n; t += 16) exp_chunk<true>(row[i], t);
    normalize(row[i], fp16_probabilities);
  }
}

}  // namespace

TROUPE_TARGET_AVX512 void softmax_rows_avx512(const TileRows& rows, bool fp16_probabilities) {
  int32_t r0 = 0;
  for (; r0 + 4 <= rows.num_rows; r0 += 4) softmax_group512<4>(rows, r0, fp16_probabilities);
  for (; r0 < rows.num_rows; ++r0) softmax_group512<1>(rows, r0, fp16_probabilities);
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

TROUPE_TARGET_AVX512 void tile_scores_avx512(const float* keys, int32_t first, int32_t count,
                                             int32_t hd, const float* q, float scale,
                                             const TileRows& rows) {
  const int32_t pairs = rows.num_rows / 2;  // num_rows is even for this layout
  for (int32_t p0 = 0; p0 < pairs; p0 += 3) {
    const int32_t rp = std::min(3, pairs - p0);
    const RowSpan span = row_span(rows, 2 * p0, 2 * rp, first + count);
    const float* qp = q + static_cast<int64_t>(p0) * 2 * hd;
    float* s = rows.s + 2 * p0 * rows.s_stride;
    switch (rp) {
      case 1: scores_pairs512<1>(keys, first, span.end_any, hd, qp, scale, s, rows.s_stride); break;
      case 2: scores_pairs512<2>(keys, first, span.end_any, hd, qp, scale, s, rows.s_stride); break;
      default:
        scores_pairs512<3>(keys, first, span.end_any, hd, qp, scale, s, rows.s_stride);
        break;
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
void softmax_rows_avx512(const TileRows&, bool) {}
void tile_scores_avx2(const float*, int32_t, int32_t, int32_t, const float*, float,
                      const TileRows&) {}
void tile_scores_avx512(const float*, int32_t, int32_t, int32_t, const float*, float,
                        const TileRows&) {}
void tile_values_avx2(const float*, int32_t, int32_t, int32_t, const TileRows&, float*) {}
void tile_values_avx512(const float*, int32_t, int32_t, int32_t, const TileRows&, float*) {}
#endif

}  // namespace troupe::gpu::cpu::detail
