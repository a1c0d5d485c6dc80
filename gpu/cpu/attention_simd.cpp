// AVX2 and AVX-512 forms of the attention steps (orders in attention_kernels.hpp). Vectors hold
// independent accumulators or independent outputs only; every horizontal sum is done as a
// transposed tree over 8 results at once, with each result's additions in the scalar order.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "gpu/cpu/attention_kernels.hpp"
#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/vec_math.hpp"

namespace troupe::gpu::cpu::detail {

#if TROUPE_X86
namespace {

// Eight ggml_vec_dot_f16 folds of x_i (already (a0 + a2) + (a1 + a3)):
// r_i = ((x0 + x4) + (x1 + x5)) + ((x2 + x6) + (x3 + x7)).
TROUPE_TARGET_AVX2 inline __m256 reduce32_x8(const __m256* x) {
  const __m256 p01 = fold_halves(x[0], x[1]), p23 = fold_halves(x[2], x[3]);
  const __m256 p45 = fold_halves(x[4], x[5]), p67 = fold_halves(x[6], x[7]);
  // Per 128-bit lane, each result's (t0 + t1), (t2 + t3).
  const __m256 s = _mm256_add_ps(_mm256_shuffle_ps(p01, p23, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(p01, p23, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m256 t = _mm256_add_ps(_mm256_shuffle_ps(p45, p67, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(p45, p67, _MM_SHUFFLE(3, 1, 3, 1)));
  return unshuffle(_mm256_add_ps(_mm256_shuffle_ps(s, t, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(s, t, _MM_SHUFFLE(3, 1, 3, 1))));
}

TROUPE_TARGET_AVX2 inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

TROUPE_TARGET_AVX512 inline __m512 load_f16x16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

TROUPE_TARGET_AVX2 inline void store_first(float* dst, __m256 v, int32_t count) {
  if (count == 8) {
    _mm256_storeu_ps(dst, v);
    return;
  }
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  for (int32_t i = 0; i < count; ++i) dst[i] = tmp[i];
}

// The row pointers of keys t0 .. t0+7; past n, repeats of the last key (lanes computed and
// dropped).
inline void eight_rows(const uint16_t* const* rows, int32_t t0, int32_t n, const uint16_t** r) {
  for (int32_t i = 0; i < 8; ++i) r[i] = rows[std::min(t0 + i, n - 1)];
}

// A decode's keys sit in KV blocks scattered over an arena far larger than the caches, in runs
// of block_size rows, too short for the hardware prefetcher to get ahead of the FMA loop:
// requests for the rows a few 8-key groups ahead keep several misses in flight. The score pass
// requests both K rows and V rows (the value pass reads them a few microseconds later, in slot
// order, keys 32 apart), into L2: requests into L1 (prefetcht0) ran ~30 % slower at contexts
// 1024-2048 (decode_roofline_bench --attention-only, Zen 4), the L1's few miss buffers filling.
inline constexpr int32_t kPrefetchKeysAhead = 32;
inline void prefetch_rows_l2(const uint16_t* const* rows, int32_t t0, int32_t n, int32_t hd) {
  const int32_t end = std::min(t0 + 8, n);
  for (int32_t t = t0; t < end; ++t) {
    const char* p = reinterpret_cast<const char*>(rows[t]);
    for (int32_t b = 0; b < hd * 2; b += 64) __builtin_prefetch(p + b, 0, 2);
  }
}

}  // namespace

TROUPE_TARGET_AVX2 void scores_chunk_avx2(const uint16_t* const* rows, int32_t n, int32_t hd,
                                          const float* q, int32_t group, float scale, float* s) {
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int32_t t0 = 0; t0 < n; t0 += 8) {
    const uint16_t* r[8];
    eight_rows(rows, t0, n, r);
    for (int32_t g = 0; g < group; ++g) {
      const float* qg = q + static_cast<int64_t>(g) * hd;
      __m256 acc[8];
      for (auto& a : acc) a = _mm256_setzero_ps();
      for (int32_t d = 0; d < hd; d += 8) {
        const __m256 qv = _mm256_loadu_ps(qg + d);
        for (int i = 0; i < 8; ++i) acc[i] = _mm256_fmadd_ps(qv, load_f16x8(r[i] + d), acc[i]);
      }
      store_first(s + static_cast<int64_t>(g) * n + t0, _mm256_mul_ps(hsum8_x8(acc), vscale),
                  std::min(8, n - t0));
    }
  }
}

TROUPE_TARGET_AVX2 void values_chunk_avx2(const uint16_t* const* rows, int32_t n, int32_t hd,
                                          const float* p, int32_t group, float* out) {
  for (int32_t g = 0; g < group; ++g) {
    const float* pg = p + static_cast<int64_t>(g) * n;
    for (int32_t c = 0; c < hd; c += 8) {
      __m256 acc[8];
      for (auto& a : acc) a = _mm256_setzero_ps();
      int32_t t = 0;
      for (; t + 8 <= n; t += 8) {
        for (int i = 0; i < 8; ++i) {
          acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(pg[t + i]), load_f16x8(rows[t + i] + c), acc[i]);
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        if (t + i < n) {
          acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(pg[t + i]), load_f16x8(rows[t + i] + c), acc[i]);
        }
      }
      const __m256 v0 = _mm256_add_ps(acc[0], acc[4]), v1 = _mm256_add_ps(acc[1], acc[5]);
      const __m256 v2 = _mm256_add_ps(acc[2], acc[6]), v3 = _mm256_add_ps(acc[3], acc[7]);
      _mm256_storeu_ps(out + static_cast<int64_t>(g) * hd + c,
                       _mm256_add_ps(_mm256_add_ps(v0, v2), _mm256_add_ps(v1, v3)));
    }
  }
}

namespace {

template <int C>  // 16-dim chunks per pass
TROUPE_TARGET_AVX512 void values_chunk_pass512(const uint16_t* const* rows, int32_t n,
                                               const float* pg, int32_t c0, float* out) {
  __m512 acc[C][8];
  for (auto& ac : acc) {
    for (auto& a : ac) a = _mm512_setzero_ps();
  }
  int32_t t = 0;
  for (; t + 8 <= n; t += 8) {
    for (int i = 0; i < 8; ++i) {
      const __m512 pv = _mm512_set1_ps(pg[t + i]);
      for (int j = 0; j < C; ++j) {
        const __m512 v = _mm512_cvtph_ps(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t + i] + c0 + 16 * j)));
        acc[j][i] = _mm512_fmadd_ps(pv, v, acc[j][i]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    if (t + i < n) {
      const __m512 pv = _mm512_set1_ps(pg[t + i]);
      for (int j = 0; j < C; ++j) {
        const __m512 v = _mm512_cvtph_ps(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t + i] + c0 + 16 * j)));
        acc[j][i] = _mm512_fmadd_ps(pv, v, acc[j][i]);
      }
    }
  }
  for (int j = 0; j < C; ++j) {
    const __m512 v0 = _mm512_add_ps(acc[j][0], acc[j][4]), v1 = _mm512_add_ps(acc[j][1], acc[j][5]);
    const __m512 v2 = _mm512_add_ps(acc[j][2], acc[j][6]), v3 = _mm512_add_ps(acc[j][3], acc[j][7]);
    _mm512_storeu_ps(out + c0 + 16 * j, _mm512_add_ps(_mm512_add_ps(v0, v2), _mm512_add_ps(v1, v3)));
  }
}

}  // namespace

TROUPE_TARGET_AVX512 void values_chunk_avx512(const uint16_t* const* rows, int32_t n,
                                              int32_t hd, const float* p, int32_t group,
                                              float* out) {
  for (int32_t g = 0; g < group; ++g) {
    const float* pg = p + static_cast<int64_t>(g) * n;
    float* og = out + static_cast<int64_t>(g) * hd;
    int32_t c = 0;
    for (; c + 32 <= hd; c += 32) values_chunk_pass512<2>(rows, n, pg, c, og);
    for (; c < hd; c += 16) values_chunk_pass512<1>(rows, n, pg, c, og);
  }
}

TROUPE_TARGET_AVX2 void softmax_row_avx2(float* s, int32_t n, bool fp16_probabilities) {
  // The maximum is order-free (scores are finite; +0 and -0 give the same exponentials).
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  int32_t t = 0;
  for (; t + 8 <= n; t += 8) vmax = _mm256_max_ps(_mm256_loadu_ps(s + t), vmax);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float mx = -INFINITY;
  for (float v : lanes) mx = v > mx ? v : mx;
  for (; t < n; ++t) mx = s[t] > mx ? s[t] : mx;
  const __m256 vmx = _mm256_set1_ps(mx);
  double sum = 0.0;
  for (t = 0; t + 8 <= n; t += 8) {
    const __m256 e = ggml_expf256(_mm256_sub_ps(_mm256_loadu_ps(s + t), vmx));
    _mm256_storeu_ps(s + t, e);
    sum += static_cast<double>(hsum8_avx2(e));
  }
  if (t < n) {
    const int32_t rest = n - t;
    alignas(32) float block[8] = {};
    for (int32_t j = 0; j < rest; ++j) block[j] = s[t + j];
    __m256 e = ggml_expf256(_mm256_sub_ps(_mm256_load_ps(block), vmx));
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    e = _mm256_and_ps(e, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(rest), lane)));
    _mm256_store_ps(block, e);
    for (int32_t j = 0; j < rest; ++j) s[t + j] = block[j];
    sum += static_cast<double>(hsum8_avx2(e));
  }
  const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / sum));
  for (t = 0; t + 8 <= n; t += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + t), inv);
    if (fp16_probabilities) v = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    _mm256_storeu_ps(s + t, v);
  }
  if (t < n) {
    alignas(32) float block[8] = {};
    for (int32_t j = 0; j < n - t; ++j) block[j] = s[t + j];
    __m256 v = _mm256_mul_ps(_mm256_load_ps(block), inv);
    if (fp16_probabilities) v = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    _mm256_store_ps(block, v);
    for (int32_t j = 0; j < n - t; ++j) s[t + j] = block[j];
  }
}

// ---- Decode order (a generated token), a GQA group at once ----
//
// The query heads of a group read the same K and V rows: each pass over the rows converts a row
// once and applies it to up to kDecodeHeadsPerPass heads, whose accumulators stay in registers
// (the loops over heads, 8-key lanes and dim chunks are unrolled for that: GCC keeps an array
// indexed by a loop variable in memory otherwise). Per (query head, key) the operations are
// those of the one-head form, in the same order.

namespace {

inline constexpr int32_t kDecodeHeadsPerPass = 4;

// Scores of G heads (q: [G][hd], s: [G][n]) against keys [0, n). Per key and head, four 8-lane
// accumulators over dims d, d + 32, ... (ggml_vec_dot_f16), folded to x = (a0 + a2) + (a1 + a3),
// then eight keys' x reduced at once.
template <int G>
TROUPE_TARGET_AVX2 void scores_decode_pass_avx2(const uint16_t* const* rows,
                                                const uint16_t* const* v_rows, int32_t n,
                                                int32_t hd, const float* q, float scale, float* s) {
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int32_t t0 = 0; t0 < n; t0 += 8) {
    const uint16_t* r[8];
    eight_rows(rows, t0, n, r);
    prefetch_rows_l2(rows, t0 + kPrefetchKeysAhead, n, hd);
    prefetch_rows_l2(v_rows, t0 + kPrefetchKeysAhead, n, hd);
    __m256 x[G][8];
#pragma GCC unroll 16
    for (int i = 0; i < 8; ++i) {
      __m256 a[G][4];
#pragma GCC unroll 16
      for (auto& ag : a) {
#pragma GCC unroll 16
        for (auto& v : ag) v = _mm256_setzero_ps();
      }
      for (int32_t d = 0; d < hd; d += 32) {
#pragma GCC unroll 16
        for (int j = 0; j < 4; ++j) {
          const __m256 k = load_f16x8(r[i] + d + 8 * j);
#pragma GCC unroll 16
          for (int g = 0; g < G; ++g) {
            a[g][j] = _mm256_fmadd_ps(k, _mm256_loadu_ps(q + g * hd + d + 8 * j), a[g][j]);
          }
        }
      }
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) {
        x[g][i] = _mm256_add_ps(_mm256_add_ps(a[g][0], a[g][2]), _mm256_add_ps(a[g][1], a[g][3]));
      }
    }
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
      store_first(s + static_cast<int64_t>(g) * n + t0, _mm256_mul_ps(reduce32_x8(x[g]), vscale),
                  std::min(8, n - t0));
    }
  }
}

// The same with 16 lanes: one zmm holds accumulators a0|a1 (dims d .. d + 15), another a2|a3;
// their sum is (a0 + a2)|(a1 + a3), and its two halves added give x.
template <int G>
TROUPE_TARGET_AVX512 void scores_decode_pass_avx512(const uint16_t* const* rows,
                                                    const uint16_t* const* v_rows, int32_t n,
                                                    int32_t hd, const float* q, float scale,
                                                    float* s) {
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int32_t t0 = 0; t0 < n; t0 += 8) {
    const uint16_t* r[8];
    eight_rows(rows, t0, n, r);
    prefetch_rows_l2(rows, t0 + kPrefetchKeysAhead, n, hd);
    prefetch_rows_l2(v_rows, t0 + kPrefetchKeysAhead, n, hd);
    __m256 x[G][8];
#pragma GCC unroll 16
    for (int i = 0; i < 8; ++i) {
      __m512 a[G][2];
#pragma GCC unroll 16
      for (auto& ag : a) ag[0] = ag[1] = _mm512_setzero_ps();
      for (int32_t d = 0; d < hd; d += 32) {
        const __m512 k0 = load_f16x16(r[i] + d), k1 = load_f16x16(r[i] + d + 16);
#pragma GCC unroll 16
        for (int g = 0; g < G; ++g) {
          a[g][0] = _mm512_fmadd_ps(k0, _mm512_loadu_ps(q + g * hd + d), a[g][0]);
          a[g][1] = _mm512_fmadd_ps(k1, _mm512_loadu_ps(q + g * hd + d + 16), a[g][1]);
        }
      }
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) {
        const __m512 folded = _mm512_add_ps(a[g][0], a[g][1]);
        x[g][i] = _mm256_add_ps(_mm512_castps512_ps256(folded), _mm512_extractf32x8_ps(folded, 1));
      }
    }
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
      store_first(s + static_cast<int64_t>(g) * n + t0, _mm256_mul_ps(reduce32_x8(x[g]), vscale),
                  std::min(8, n - t0));
    }
  }
}

// The value sums visit the 32 slots (slot i: keys t = i mod 32) one at a time, each a chain of
// FMAs from +0 held in registers, in this order, so that slot j's and slot 16 + j's chains are
// added before slots 8 + j and 24 + j are run: x_j = (a_j + a_16+j) + (a_8+j + a_24+j) as
// reduce32 pairs them, and no slot is stored. A slot with no keys (n < 32) is +0, as in the
// scalar form.
inline constexpr int32_t kSlotOffsets[4] = {0, 16, 8, 24};

// A slot's keys are 32 rows apart: its loop requests the row 4 keys ahead (the score pass has
// already brought the V rows into L2; this takes them on to L1).
inline constexpr int32_t kSlotPrefetchAhead = 4 * 32;
inline void prefetch_dims(const uint16_t* const* rows, int32_t t, int32_t n, int32_t first_dim,
                          int32_t dims) {
  if (t >= n) return;
  const char* p = reinterpret_cast<const char*>(rows[t] + first_dim);
  for (int32_t b = 0; b < 2 * dims; b += 64) __builtin_prefetch(p + b);
}

// out[g][c0, c0 + 8 * CH) of G heads (p: [G][n], out: [G][hd]).
template <int G, int CH>
TROUPE_TARGET_AVX2 void values_decode_pass_avx2(const uint16_t* const* rows, int32_t n, int32_t hd,
                                                const float* p, int32_t c0, float* out) {
  __m256 x[G][8][CH];
  for (int32_t j = 0; j < 8; ++j) {
    __m256 first[G][CH], second[G][CH];
    for (int32_t k = 0; k < 4; ++k) {
      const int32_t slot = j + kSlotOffsets[k];
      __m256 acc[G][CH];
#pragma GCC unroll 16
      for (auto& ag : acc) {
#pragma GCC unroll 16
        for (auto& v : ag) v = _mm256_setzero_ps();
      }
      for (int32_t t = slot; t < n; t += 32) {
        prefetch_dims(rows, t + kSlotPrefetchAhead, n, c0, 8 * CH);
        __m256 v[CH];
#pragma GCC unroll 16
        for (int c = 0; c < CH; ++c) v[c] = load_f16x8(rows[t] + c0 + 8 * c);
#pragma GCC unroll 16
        for (int g = 0; g < G; ++g) {
          const __m256 pv = _mm256_set1_ps(p[static_cast<int64_t>(g) * n + t]);
#pragma GCC unroll 16
          for (int c = 0; c < CH; ++c) acc[g][c] = _mm256_fmadd_ps(v[c], pv, acc[g][c]);
        }
      }
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) {
#pragma GCC unroll 16
        for (int c = 0; c < CH; ++c) {
          if (k == 0) first[g][c] = acc[g][c];
          if (k == 1) first[g][c] = _mm256_add_ps(first[g][c], acc[g][c]);
          if (k == 2) second[g][c] = acc[g][c];
          if (k == 3)
            x[g][j][c] = _mm256_add_ps(first[g][c], _mm256_add_ps(second[g][c], acc[g][c]));
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) {
#pragma GCC unroll 16
    for (int c = 0; c < CH; ++c) {
      const __m256 t0 = _mm256_add_ps(x[g][0][c], x[g][4][c]),
                   t1 = _mm256_add_ps(x[g][1][c], x[g][5][c]);
      const __m256 t2 = _mm256_add_ps(x[g][2][c], x[g][6][c]),
                   t3 = _mm256_add_ps(x[g][3][c], x[g][7][c]);
      _mm256_storeu_ps(out + static_cast<int64_t>(g) * hd + c0 + 8 * c,
                       _mm256_add_ps(_mm256_add_ps(t0, t1), _mm256_add_ps(t2, t3)));
    }
  }
}

// The same with 16 lanes: out[g][c0, c0 + 16 * CH).
template <int G, int CH>
TROUPE_TARGET_AVX512 void values_decode_pass_avx512(const uint16_t* const* rows, int32_t n,
                                                    int32_t hd, const float* p, int32_t c0,
                                                    float* out) {
  __m512 x[G][8][CH];
  for (int32_t j = 0; j < 8; ++j) {
    __m512 first[G][CH], second[G][CH];
    for (int32_t k = 0; k < 4; ++k) {
      const int32_t slot = j + kSlotOffsets[k];
      __m512 acc[G][CH];
#pragma GCC unroll 16
      for (auto& ag : acc) {
#pragma GCC unroll 16
        for (auto& v : ag) v = _mm512_setzero_ps();
      }
      for (int32_t t = slot; t < n; t += 32) {
        prefetch_dims(rows, t + kSlotPrefetchAhead, n, c0, 16 * CH);
        __m512 v[CH];
#pragma GCC unroll 16
        for (int c = 0; c < CH; ++c) v[c] = load_f16x16(rows[t] + c0 + 16 * c);
#pragma GCC unroll 16
        for (int g = 0; g < G; ++g) {
          const __m512 pv = _mm512_set1_ps(p[static_cast<int64_t>(g) * n + t]);
#pragma GCC unroll 16
          for (int c = 0; c < CH; ++c) acc[g][c] = _mm512_fmadd_ps(v[c], pv, acc[g][c]);
        }
      }
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) {
#pragma GCC unroll 16
        for (int c = 0; c < CH; ++c) {
          if (k == 0) first[g][c] = acc[g][c];
          if (k == 1) first[g][c] = _mm512_add_ps(first[g][c], acc[g][c]);
          if (k == 2) second[g][c] = acc[g][c];
          if (k == 3)
            x[g][j][c] = _mm512_add_ps(first[g][c], _mm512_add_ps(second[g][c], acc[g][c]));
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) {
#pragma GCC unroll 16
    for (int c = 0; c < CH; ++c) {
      const __m512 t0 = _mm512_add_ps(x[g][0][c], x[g][4][c]),
                   t1 = _mm512_add_ps(x[g][1][c], x[g][5][c]);
      const __m512 t2 = _mm512_add_ps(x[g][2][c], x[g][6][c]),
                   t3 = _mm512_add_ps(x[g][3][c], x[g][7][c]);
      _mm512_storeu_ps(out + static_cast<int64_t>(g) * hd + c0 + 16 * c,
                       _mm512_add_ps(_mm512_add_ps(t0, t1), _mm512_add_ps(t2, t3)));
    }
  }
}

// Runs kernel<G> for the heads [g0, g0 + G) of a group in passes of at most
// kDecodeHeadsPerPass heads; `pass(G-constant, g0)` calls the right instantiation.
template <typename Pass>
inline void in_passes(int32_t group, const Pass& pass) {
  for (int32_t g0 = 0; g0 < group; g0 += kDecodeHeadsPerPass) {
    switch (std::min(group - g0, kDecodeHeadsPerPass)) {
      case 1: pass(std::integral_constant<int, 1>{}, g0); break;
      case 2: pass(std::integral_constant<int, 2>{}, g0); break;
      case 3: pass(std::integral_constant<int, 3>{}, g0); break;
      default: pass(std::integral_constant<int, 4>{}, g0); break;
    }
  }
}

}  // namespace

void scores_decode_avx2(const uint16_t* const* rows, const uint16_t* const* v_rows, int32_t n,
                        int32_t hd, const float* q, int32_t group, float scale, float* s) {
  in_passes(group, [&](auto g, int32_t g0) {
    scores_decode_pass_avx2<decltype(g)::value>(rows, v_rows, n, hd,
                                                q + static_cast<int64_t>(g0) * hd, scale,
                                                s + static_cast<int64_t>(g0) * n);
  });
}

void scores_decode_avx512(const uint16_t* const* rows, const uint16_t* const* v_rows, int32_t n,
                          int32_t hd, const float* q, int32_t group, float scale, float* s) {
  in_passes(group, [&](auto g, int32_t g0) {
    scores_decode_pass_avx512<decltype(g)::value>(rows, v_rows, n, hd,
                                                  q + static_cast<int64_t>(g0) * hd, scale,
                                                  s + static_cast<int64_t>(g0) * n);
  });
}

void values_decode_avx2(const uint16_t* const* rows, int32_t n, int32_t hd, const float* p,
                        int32_t group, float* out) {
  in_passes(group, [&](auto g, int32_t g0) {
    constexpr int G = decltype(g)::value;
    const float* pg = p + static_cast<int64_t>(g0) * n;
    float* og = out + static_cast<int64_t>(g0) * hd;
    // At least 6 chains per slot (FMA latency 4, two FMA ports) within 16 registers.
    constexpr int kChunks = G == 1 ? 8 : G == 2 ? 4 : 2;
    int32_t c = 0;
    for (; c + 8 * kChunks <= hd; c += 8 * kChunks) {
      values_decode_pass_avx2<G, kChunks>(rows, n, hd, pg, c, og);
    }
    for (; c < hd; c += 8) values_decode_pass_avx2<G, 1>(rows, n, hd, pg, c, og);
  });
}

void values_decode_avx512(const uint16_t* const* rows, int32_t n, int32_t hd, const float* p,
                          int32_t group, float* out) {
  in_passes(group, [&](auto g, int32_t g0) {
    constexpr int G = decltype(g)::value;
    const float* pg = p + static_cast<int64_t>(g0) * n;
    float* og = out + static_cast<int64_t>(g0) * hd;
    int32_t c = 0;
    for (; c + 64 <= hd; c += 64) values_decode_pass_avx512<G, 4>(rows, n, hd, pg, c, og);
    for (; c < hd; c += 16) values_decode_pass_avx512<G, 1>(rows, n, hd, pg, c, og);
  });
}

#else
void scores_chunk_avx2(const uint16_t* const*, int32_t, int32_t, const float*, int32_t, float, float*) {}
void scores_decode_avx2(const uint16_t* const*, const uint16_t* const*, int32_t, int32_t,
                        const float*, int32_t, float, float*) {}
void values_chunk_avx2(const uint16_t* const*, int32_t, int32_t, const float*, int32_t, float*) {}
void values_chunk_avx512(const uint16_t* const*, int32_t, int32_t, const float*, int32_t, float*) {}
void values_decode_avx2(const uint16_t* const*, int32_t, int32_t, const float*, int32_t, float*) {}
void scores_decode_avx512(const uint16_t* const*, const uint16_t* const*, int32_t, int32_t,
                          const float*, int32_t, float, float*) {}
void values_decode_avx512(const uint16_t* const*, int32_t, int32_t, const float*, int32_t, float*) {
}
void softmax_row_avx2(float*, int32_t, bool) {}
#endif

}  // namespace troupe::gpu::cpu::detail
