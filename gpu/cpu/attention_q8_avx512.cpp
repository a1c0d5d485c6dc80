// The q8_0 cache's AVX-512 kernels (attention_q8_kernels.hpp): the AVX2 set with its heaviest
// kernels at twice the width or more, each still giving its scalar twin's bits
// (attention_q8.cpp). A lane does exactly what the same lane of the AVX2 form does; the wider
// register holds more keys or values, never a different order within one output.
//
//   scores             two keys per register: a key's block fills one 256-bit half, its query
//                      block is broadcast to both; VNNI's vpdpbusd gives each 32-bit lane the
//                      sum of its four byte products (K read as K + 128, less the query's bias:
//                      the integer the AVX2 form's maddubs + madd give); sixteen keys' lane sums
//                      reduced together (hsum8_x16)
//   softmax            sixteen keys per register: the running maximum as a prefix maximum,
//                      libm's expf in sixteen lanes
//   accumulate_heads   two blocks (64 values, four registers) of each item per pass, a V block
//                      dequantized once for every item
//   accumulate         up to three items at once, 64 values (four registers) each per pass
// The scores prefetch the next chunk's rows (Q8Ahead) as they go.
#include <algorithm>
#include <cmath>

#include "gpu/cpu/attention_kernels.hpp"
#include "gpu/cpu/attention_q8_kernels.hpp"
#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/libm_expf.hpp"

namespace troupe::gpu::cpu::detail {

#if TROUPE_X86
namespace {

constexpr int32_t kQk = kQ8Block;

// Two 32-byte blocks side by side: `lo` in the low half.
TROUPE_TARGET_AVX512 inline __m512i pair_of(const int8_t* lo, const int8_t* hi) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo));
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi));
  return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

// hsum8_x8 (attention_kernels.hpp) for sixteen keys at once: z[p] holds keys 2p and 2p + 1 in
// its 256-bit halves; result lane k is key k's sum in hsum8's order.
TROUPE_TARGET_AVX512 inline __m512 hsum8_x16(const __m512* z) {
  return _mm512_permutexvar_ps(
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), hsum8_halves_x16(z));
}

// A query block as scores_avx512 uses it, prepared once per call: its 32 bytes in both halves,
// its scale broadcast, and per 32-bit lane -128 * (the sum of the lane's four bytes). VNNI's
// vpdpbusd multiplies unsigned bytes by signed ones, so K is read as K + 128 (K xor 0x80):
// starting from that bias, each lane's sum is exactly sum(K * q) over its four bytes, the integer
// the AVX2 form's maddubs + madd give.
struct QueryBlock {
  __m512i bytes;
  __m512i bias;
  __m512 d;
};

// The most query heads and blocks (head_dim 256) one scores_avx512 pass keeps prepared.
constexpr int32_t kScoreHeads = 4;
constexpr int32_t kMaxBlocks = 8;

// scores_avx2's sums, two keys at a time: each (key, head) pair sums its blocks in the same
// eight lanes, in the same order (lane = fma(d_K * d_Q, float(its integer sum), lane)), then
// sixteen keys' lane sums of a head are reduced together (hsum8_x16, hsum8's order) and scaled.
TROUPE_TARGET_AVX512 void scores_avx512(const BlockQ8_0* const* rows, int32_t n, const BlockQ8_0* q,
                                        int32_t heads, int32_t blocks, float scale, float* s,
                                        const Q8Ahead& ahead) {
  if (blocks > kMaxBlocks) {  // past every model's head_dim here: the AVX2 form
    q8_avx2_kernels(false).scores(rows, n, q, heads, blocks, scale, s, ahead);
    return;
  }
  const __m512 by = _mm512_set1_ps(scale);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  QueryBlock qb[kScoreHeads][kMaxBlocks];
  for (int32_t h0 = 0; h0 < heads; h0 += kScoreHeads) {
    const int32_t hn = std::min(kScoreHeads, heads - h0);
    for (int32_t h = 0; h < hn; ++h) {
      for (int32_t b = 0; b < blocks; ++b) {
        const BlockQ8_0& x = q[(h0 + h) * blocks + b];
        QueryBlock& o = qb[h][b];
        o.bytes = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs)));
        o.bias = _mm512_sub_epi32(_mm512_setzero_si512(),
                                  _mm512_dpbusd_epi32(_mm512_setzero_si512(), flip, o.bytes));
        o.d = _mm512_set1_ps(_cvtsh_ss(x.d));
      }
    }
    for (int32_t i0 = 0; i0 < n; i0 += 16) {
      const int32_t m = std::min(16, n - i0);
      __m512 sums[kScoreHeads][8];  // [head][pair]: keys 2p and 2p + 1
      for (int32_t j = 0; j < 16; j += 2) {
        if (h0 == 0) {
          prefetch_ahead(ahead, i0 + j, blocks);
          prefetch_ahead(ahead, i0 + j + 1, blocks);
        }
        __m512 acc[kScoreHeads];
        for (int32_t h = 0; h < kScoreHeads; ++h) acc[h] = _mm512_setzero_ps();
        if (j < m) {
          // An odd last key is paired with itself; its twin's sums land in an unread lane.
          const BlockQ8_0* lo = rows[i0 + j];
          const BlockQ8_0* hi = rows[i0 + std::min(j + 1, m - 1)];
          for (int32_t b = 0; b < blocks; ++b) {
            const __m512i kx = _mm512_xor_si512(pair_of(lo[b].qs, hi[b].qs), flip);
            const __m512 dk = _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(lo[b].d)),
                                                 _mm256_set1_ps(_cvtsh_ss(hi[b].d)), 1);
            for (int32_t h = 0; h < hn; ++h) {
              const QueryBlock& y = qb[h][b];
              const __m512 products = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(y.bias, kx, y.bytes));
              acc[h] = _mm512_fmadd_ps(_mm512_mul_ps(dk, y.d), products, acc[h]);
            }
          }
        }
        for (int32_t h = 0; h < hn; ++h) sums[h][j / 2] = acc[h];
      }
      const auto valid = static_cast<__mmask16>((1u << m) - 1);
      for (int32_t h = 0; h < hn; ++h) {
        _mm512_mask_storeu_ps(s + (h0 + h) * kQ8KeyChunk + i0, valid,
                              _mm512_mul_ps(hsum8_x16(sums[h]), by));
      }
    }
  }
}

// x's lanes moved up by kBy (lane i takes lane i - kBy), `fill`'s below.
template <int kBy>
TROUPE_TARGET_AVX512 inline __m512 shift_up(__m512 x, __m512 fill) {
  return _mm512_castsi512_ps(
      _mm512_alignr_epi32(_mm512_castps_si512(x), _mm512_castps_si512(fill), 16 - kBy));
}

// softmax_scalar's values, sixteen keys per register. The running maximum before each key is a
// prefix maximum of the scores (a maximum is one of its operands, so any grouping gives the
// chain's value, up to the sign of a zero, which neither a difference below nor expf can tell);
// the new-maximum test, the arguments and the factors are lane-wise selects; expf is libm's in
// sixteen lanes (libm_expf.hpp). The sums' fma chains stay key by key, the items' interleaved.
// A chunk with a NaN score (a model's overflow) takes the twin itself: its compares would not
// be a maximum's.
TROUPE_TARGET_AVX512 void softmax_avx512(float* const* states, int32_t items, const float* s,
                                         int32_t n, float* ms, float* vs, bool* rescaled) {
  const auto valid_at = [n](int32_t i0) {
    return n - i0 >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i0)) - 1);
  };
  for (int32_t item = 0; item < items; ++item) {
    for (int32_t i0 = 0; i0 < n; i0 += 16) {
      const __m512 x = _mm512_maskz_loadu_ps(valid_at(i0), s + item * kQ8KeyChunk + i0);
      if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) != 0) {
        q8_scalar_kernels().softmax(states, items, s, n, ms, vs, rescaled);
        return;
      }
    }
  }
  const __m512 none = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);
  for (int32_t item = 0; item < items; ++item) {
    __m512 m = _mm512_set1_ps(states[item][0]);
    bool rescale = false;
    for (int32_t i0 = 0; i0 < n; i0 += 16) {
      const __mmask16 valid = valid_at(i0);
      const int32_t at = item * kQ8KeyChunk + i0;
      const __m512 x = _mm512_maskz_loadu_ps(valid, s + at);
      __m512 running = _mm512_max_ps(x, shift_up<1>(x, none));
      running = _mm512_max_ps(running, shift_up<2>(running, none));
      running = _mm512_max_ps(running, shift_up<4>(running, none));
      running = _mm512_max_ps(running, shift_up<8>(running, none));
      running = _mm512_max_ps(running, m);
      const __m512 before = shift_up<1>(running, m);
      const __mmask16 is_new = _mm512_mask_cmp_ps_mask(valid, x, before, _CMP_GT_OQ);
      const __m512 arg = _mm512_mask_sub_ps(_mm512_sub_ps(x, before), is_new, before, x);
      const __m512 e = libm_expf_x16_avx512(arg);
      const __m512 scale = _mm512_mask_mov_ps(one, is_new, e);
      _mm512_storeu_ps(ms + at, scale);
      _mm512_storeu_ps(vs + at, _mm512_mask_mov_ps(e, is_new, one));
      rescale = rescale || _mm512_mask_cmp_ps_mask(valid, scale, one, _CMP_NEQ_UQ) != 0;
      const int32_t last = std::min(16, n - i0) - 1;
      m = _mm512_permutexvar_ps(_mm512_set1_epi32(last), running);
    }
    states[item][0] = _mm512_cvtss_f32(m);
    rescaled[item] = rescale;
  }
  // Four items' chains at a time in registers (an array indexed by item would be kept in memory,
  // a store and a load inside every link of the chain); a missing item's lanes compute nothing
  // that is stored.
  for (int32_t g = 0; g < items; g += 4) {
    const int32_t gn = std::min<int32_t>(4, items - g);
    const float* m[4];
    const float* v[4];
    __m128 sum[4];
    for (int32_t j = 0; j < 4; ++j) {
      const int32_t item = g + std::min(j, gn - 1);
      m[j] = ms + item * kQ8KeyChunk;
      v[j] = vs + item * kQ8KeyChunk;
      sum[j] = _mm_set_ss(states[item][1]);
    }
    for (int32_t i = 0; i < n; ++i) {
      for (int32_t j = 0; j < 4; ++j)
        sum[j] = _mm_fmadd_ss(sum[j], _mm_load_ss(m[j] + i), _mm_load_ss(v[j] + i));
    }
    for (int32_t j = 0; j < gn; ++j) states[g + j][1] = _mm_cvtss_f32(sum[j]);
  }
}

// 16 values of a block: float(q) * d.
TROUPE_TARGET_AVX512 inline __m512 dequantize_half(const BlockQ8_0& x, int half, __m512 d) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qs + 16 * half));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d);
}

// Where an accumulation pass's V registers come from. A generated token's: its q8_0 V rows,
// dequantized (kRegs / 2 blocks from block b of each row).
template <int32_t kRegs>
struct QuantizedRows {
  const BlockQ8_0* const* rows;
  int32_t b;
  TROUPE_TARGET_AVX512 void load(int32_t i, __m512* v) const {
    for (int32_t w = 0; w < kRegs / 2; ++w) {
      const BlockQ8_0& x = rows[i][b + w];
      const __m512 d = _mm512_set1_ps(_cvtsh_ss(x.d));
      v[2 * w] = dequantize_half(x, 0, d);
      v[2 * w + 1] = dequantize_half(x, 1, d);
    }
  }
};

// A prompt tile's: the chunk's V rows already dequantized ([key][head_dim] floats from `values`,
// which points at the pass's first value of key 0).
template <int32_t kRegs>
struct FloatRows {
  const float* values;
  int32_t head_dim;
  TROUPE_TARGET_AVX512 void load(int32_t i, __m512* v) const {
    const float* row = values + static_cast<int64_t>(i) * head_dim;
    for (int32_t r = 0; r < kRegs; ++r) v[r] = _mm512_loadu_ps(row + 16 * r);
  }
};

// accumulate_scalar's order per value for up to three items [h0, h0 + hn), kRegs registers of
// each item's values (from acc[h] + at) per pass across all n keys: a key's V registers come from
// `source` once for all the items; each item's accumulator is rescaled where the key is its new
// maximum, then takes fma(V, the key's weight). kRescale: whether any of the items has a new
// maximum in this chunk (deep in a context almost never: the pass then tests nothing per key).
template <int32_t kRegs, bool kRescale, class Source>
TROUPE_TARGET_AVX512 void accumulate_items(float* const* acc, int32_t h0, int32_t hn, int64_t at,
                                           const Source& source, int32_t n, const float* ms,
                                           const float* vs) {
  __m512 a[3][kRegs];
  for (int32_t h = 0; h < hn; ++h) {
    for (int32_t r = 0; r < kRegs; ++r) a[h][r] = _mm512_loadu_ps(acc[h0 + h] + at + 16 * r);
  }
  for (int32_t i = 0; i < n; ++i) {
    __m512 v[kRegs];
    source.load(i, v);
    for (int32_t h = 0; h < hn; ++h) {
      if constexpr (kRescale) {
        const float m = ms[(h0 + h) * kQ8KeyChunk + i];
        if (m != 1.0f) {
          const __m512 mm = _mm512_set1_ps(m);
          for (int32_t r = 0; r < kRegs; ++r) a[h][r] = _mm512_mul_ps(a[h][r], mm);
        }
      }
      const __m512 weight = _mm512_set1_ps(vs[(h0 + h) * kQ8KeyChunk + i]);
      for (int32_t r = 0; r < kRegs; ++r) a[h][r] = _mm512_fmadd_ps(v[r], weight, a[h][r]);
    }
  }
  for (int32_t h = 0; h < hn; ++h) {
    for (int32_t r = 0; r < kRegs; ++r) _mm512_storeu_ps(acc[h0 + h] + at + 16 * r, a[h][r]);
  }
}

template <int32_t kRegs, class Source>
TROUPE_TARGET_AVX512 void accumulate_items(float* const* acc, int32_t h0, int32_t hn, int64_t at,
                                           const Source& source, int32_t n, const float* ms,
                                           const float* vs, const bool* rescaled) {
  if (std::any_of(rescaled + h0, rescaled + h0 + hn, [](bool r) { return r; })) {
    accumulate_items<kRegs, true>(acc, h0, hn, at, source, n, ms, vs);
  } else {
    accumulate_items<kRegs, false>(acc, h0, hn, at, source, n, ms, vs);
  }
}

// accumulate_heads_avx2's order: two blocks (four registers) of each item per pass.
TROUPE_TARGET_AVX512 void accumulate_heads_avx512(float* const* acc, int32_t items,
                                                  const BlockQ8_0* const* rows, int32_t n,
                                                  int32_t blocks, const float* ms, const float* vs,
                                                  const bool* rescaled) {
  for (int32_t h0 = 0; h0 < items; h0 += 3) {
    const int32_t hn = std::min<int32_t>(3, items - h0);
    int32_t b = 0;
    for (; b + 2 <= blocks; b += 2) {
      accumulate_items<4>(acc, h0, hn, b * kQk, QuantizedRows<4>{rows, b}, n, ms, vs, rescaled);
    }
    if (b < blocks) {
      accumulate_items<2>(acc, h0, hn, b * kQk, QuantizedRows<2>{rows, b}, n, ms, vs, rescaled);
    }
  }
}

// accumulate_avx2's order: 64 values (four registers) of each item per pass.
TROUPE_TARGET_AVX512 void accumulate_avx512(float* const* acc, int32_t items, const float* values,
                                            int32_t n, int32_t head_dim, const float* ms,
                                            const float* vs, const bool* rescaled) {
  for (int32_t h0 = 0; h0 < items; h0 += 3) {
    const int32_t hn = std::min<int32_t>(3, items - h0);
    int32_t c = 0;
    for (; c + 64 <= head_dim; c += 64) {
      accumulate_items<4>(acc, h0, hn, c, FloatRows<4>{values + c, head_dim}, n, ms, vs,
                          rescaled);
    }
    for (; c < head_dim; c += 16) {
      accumulate_items<1>(acc, h0, hn, c, FloatRows<1>{values + c, head_dim}, n, ms, vs,
                          rescaled);
    }
  }
}

}  // namespace

Q8Kernels q8_avx512_kernels(bool vector_expf) {
  Q8Kernels k = q8_avx2_kernels(vector_expf);
  if (vector_expf && libm_expf_x16_agrees()) k.softmax = softmax_avx512;
  k.scores = scores_avx512;
  k.accumulate = accumulate_avx512;
  k.accumulate_heads = accumulate_heads_avx512;
  return k;
}
#else
Q8Kernels q8_avx512_kernels(bool vector_expf) {
  return q8_avx2_kernels(vector_expf);
}
#endif

}  // namespace troupe::gpu::cpu::detail
