// AVX512-BF16 kernels of the bf16 tiled prefill attention (attention_tiled_bf16.hpp), each in the
// scalar twin's order: a vdpbf16ps lane does that twin's two steps for one dim pair (scores) or
// one key pair (values), and every output is its own lane.
//
// Register blocking (32 zmm):
//   scores: 6 rows x 2 panels (32 keys) = 12 accumulator chains + 2 panel vectors; each panel
//           vector (one dim pair of 16 keys) feeds 6 rows
//   values: 6 rows x 64 dims = 24 accumulators + 4 value vectors; each value vector (one key
//           pair of 16 dims) feeds 6 rows
#include <algorithm>

#include "gpu/cpu/attention_tiled_bf16.hpp"
#include "gpu/cpu/isa_target.hpp"

namespace troupe::gpu::cpu::detail {

#if TROUPE_X86
namespace {

constexpr int kRowBlock = 6;
constexpr int32_t kPanelKeys = 16;

// Scores of rows [r0, r0 + Rr) against the Pc panels at `panels` (keys t0 ..), all dim pairs.
template <int Rr, int Pc>
TROUPE_TARGET_AVX512_BF16 void scores_block(const uint32_t* panels, int32_t hd, const uint32_t* q,
                                            int32_t r0, int32_t t0, const TileRows& rows) {
  const int32_t panel_words = kPanelKeys * hd / 2;
  __m512 acc[Rr][Pc];
  for (int r = 0; r < Rr; ++r) {
    for (int c = 0; c < Pc; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const uint32_t* qr[Rr];
  for (int r = 0; r < Rr; ++r) qr[r] = q + static_cast<int64_t>(r0 + r) * hd / 2;
  for (int32_t p = 0; p < hd / 2; ++p) {
    __m512bh k[Pc];
    for (int c = 0; c < Pc; ++c) {
      k[c] = (__m512bh)_mm512_loadu_si512(panels + c * panel_words + p * kPanelKeys);
    }
    for (int r = 0; r < Rr; ++r) {
      const __m512bh qb = (__m512bh)_mm512_set1_epi32(static_cast<int>(qr[r][p]));
      for (int c = 0; c < Pc; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], k[c], qb);
    }
  }
  for (int r = 0; r < Rr; ++r) {
    float* s = rows.s + (r0 + r) * rows.s_stride + t0;
    for (int c = 0; c < Pc; ++c) _mm512_storeu_ps(s + c * kPanelKeys, acc[r][c]);
  }
}

template <int Rr>
TROUPE_TARGET_AVX512_BF16 void scores_rows(const uint32_t* panels, int32_t first, int32_t count,
                                           int32_t hd, const uint32_t* q, const TileRows& rows,
                                           int32_t r0) {
  int32_t end = 0;  // the row block's last key in this block
  for (int r = 0; r < Rr; ++r) end = std::max(end, std::min(rows.keys[r0 + r], first + count));
  const int32_t panel_words = kPanelKeys * hd / 2;
  int32_t t = first;
  for (; t + kPanelKeys < end; t += 2 * kPanelKeys) {  // both panels hold keys below end
    scores_block<Rr, 2>(panels + (t - first) / kPanelKeys * panel_words, hd, q, r0, t, rows);
  }
  for (; t < end; t += kPanelKeys) {
    scores_block<Rr, 1>(panels + (t - first) / kPanelKeys * panel_words, hd, q, r0, t, rows);
  }
}

// Outputs of rows [r0, r0 + Rr), dims [d0, d0 + 16 Dc), over every key pair.
template <int Rr, int Dc>
TROUPE_TARGET_AVX512_BF16 void values_block(const uint32_t* v, int32_t pairs, int32_t hd,
                                            const uint32_t* p, int64_t p_stride, int32_t r0,
                                            int32_t d0, float* out, int64_t out_stride) {
  __m512 acc[Rr][Dc];
  for (int r = 0; r < Rr; ++r) {
    for (int c = 0; c < Dc; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const uint32_t* pr[Rr];
  for (int r = 0; r < Rr; ++r) pr[r] = p + (r0 + r) * p_stride;
  for (int32_t u = 0; u < pairs; ++u) {
    const uint32_t* vu = v + static_cast<int64_t>(u) * hd + d0;
    __m512bh vv[Dc];
    for (int c = 0; c < Dc; ++c) vv[c] = (__m512bh)_mm512_loadu_si512(vu + 16 * c);
    for (int r = 0; r < Rr; ++r) {
      const __m512bh pb = (__m512bh)_mm512_set1_epi32(static_cast<int>(pr[r][u]));
      for (int c = 0; c < Dc; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], vv[c], pb);
    }
  }
  for (int r = 0; r < Rr; ++r) {
    for (int c = 0; c < Dc; ++c) {
      _mm512_storeu_ps(out + (r0 + r) * out_stride + d0 + 16 * c, acc[r][c]);
    }
  }
}

template <int Rr>
TROUPE_TARGET_AVX512_BF16 void values_rows(const uint32_t* v, int32_t pairs, int32_t hd,
                                           const uint32_t* p, int64_t p_stride, int32_t r0,
                                           float* out, int64_t out_stride) {
  int32_t d0 = 0;
  for (; d0 + 64 <= hd; d0 += 64) values_block<Rr, 4>(v, pairs, hd, p, p_stride, r0, d0, out, out_stride);
  for (; d0 < hd; d0 += 16) values_block<Rr, 1>(v, pairs, hd, p, p_stride, r0, d0, out, out_stride);
}

// Runs fn.template operator()<Rr>(r0) over the rows in blocks of kRowBlock, the rest at once.
template <typename Fn>
void for_row_blocks(int32_t num_rows, const Fn& fn) {
  int32_t r0 = 0;
  for (; r0 + kRowBlock <= num_rows; r0 += kRowBlock) fn.template operator()<kRowBlock>(r0);
  switch (num_rows - r0) {
    case 5: return fn.template operator()<5>(r0);
    case 4: return fn.template operator()<4>(r0);
    case 3: return fn.template operator()<3>(r0);
    case 2: return fn.template operator()<2>(r0);
    case 1: return fn.template operator()<1>(r0);
    default: return;
  }
}

}  // namespace

TROUPE_TARGET_AVX512_BF16 void pack_probabilities_avx512(const TileRows& rows, uint32_t* probs,
                                                         int64_t stride) {
  for (int32_t r = 0; r < rows.num_rows; ++r) {
    const float* s = rows.s + r * rows.s_stride;
    uint32_t* pr = probs + r * stride;
    const int32_t n = rows.keys[r];
    for (int64_t u = 0; u < stride; u += 16) {  // 32 keys -> 16 pairs
      const int32_t t = static_cast<int32_t>(2 * u);
      const int32_t lo_n = std::clamp(n - t, 0, 16), hi_n = std::clamp(n - t - 16, 0, 16);
      const __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << lo_n) - 1), s + t);
      const __m512 hi =
          _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << hi_n) - 1), s + t + 16);
      _mm512_storeu_si512(pr + u, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
}

TROUPE_TARGET_AVX512_BF16 void convert_keys_bf16_avx512(const uint16_t* k_src,
                                                        const uint16_t* v_src, int32_t first,
                                                        int32_t count, int32_t hd, uint32_t* k,
                                                        uint32_t* v) {
  const __m512i panel_lanes = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32(kPanelKeys));
  for (int32_t t = first; t < first + count; ++t) {
    const uint16_t* kr = k_src + static_cast<int64_t>(t - first) * hd;
    const uint16_t* vr = v_src + static_cast<int64_t>(t - first) * hd;
    uint32_t* kp = k + static_cast<int64_t>(t / kPanelKeys) * kPanelKeys * (hd / 2) + t % kPanelKeys;
    // Key t is the low (even t) or the high half of its pair's words.
    const __mmask32 half = t % 2 == 0 ? 0x55555555u : 0xaaaaaaaau;
    const int shift = 16 * (t % 2);
    uint32_t* vp = v + static_cast<int64_t>(t / 2) * hd;
    for (int32_t d = 0; d < hd; d += 32) {
      const __m512 k0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kr + d)));
      const __m512 k1 =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kr + d + 16)));
      // 32 dims -> 16 dim pairs, pair p to the panel's row p (stride 16 words).
      _mm512_i32scatter_epi32(kp + static_cast<int64_t>(d / 2) * kPanelKeys, panel_lanes,
                              (__m512i)_mm512_cvtne2ps_pbh(k1, k0), 4);
      for (int32_t h = 0; h < 32; h += 16) {
        const __m512 vf =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(vr + d + h)));
        const __m512i words =
            _mm512_sll_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(vf)),
                             _mm_cvtsi32_si128(shift));
        _mm512_mask_storeu_epi16(vp + d + h, half, words);
      }
    }
  }
}

void tile_scores_bf16_avx512(const uint32_t* panels, int32_t first, int32_t count, int32_t hd,
                             const uint32_t* q, const TileRows& rows) {
  for_row_blocks(rows.num_rows, [&]<int Rr>(int32_t r0) {
    scores_rows<Rr>(panels, first, count, hd, q, rows, r0);
  });
}

void tile_values_bf16_avx512(const uint32_t* v, int32_t pairs, int32_t hd, const uint32_t* p,
                             int64_t p_stride, int32_t num_rows, float* out, int64_t out_stride) {
  for_row_blocks(num_rows, [&]<int Rr>(int32_t r0) {
    values_rows<Rr>(v, pairs, hd, p, p_stride, r0, out, out_stride);
  });
}

#else

void pack_probabilities_avx512(const TileRows& rows, uint32_t* probs, int64_t stride) {
  pack_probabilities_scalar(rows, probs, stride);
}

void convert_keys_bf16_avx512(const uint16_t* k_src, const uint16_t* v_src, int32_t first,
                              int32_t count, int32_t hd, uint32_t* k, uint32_t* v) {
  convert_keys_bf16_scalar(k_src, v_src, first, count, hd, k, v);
}

void tile_scores_bf16_avx512(const uint32_t* panels, int32_t first, int32_t count, int32_t hd,
                             const uint32_t* q, const TileRows& rows) {
  tile_scores_bf16_scalar(panels, first, count, hd, q, rows);
}

void tile_values_bf16_avx512(const uint32_t* v, int32_t pairs, int32_t hd, const uint32_t* p,
                             int64_t p_stride, int32_t num_rows, float* out, int64_t out_stride) {
  tile_values_bf16_scalar(v, pairs, hd, p, p_stride, num_rows, out, out_stride);
}

#endif

}  // namespace troupe::gpu::cpu::detail
