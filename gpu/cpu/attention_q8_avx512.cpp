// The q8_0 cache's AVX-512 kernels (attention_q8_kernels.hpp): the AVX2 set with its two
// heaviest kernels at twice the width, each still giving its scalar twin's bits
// (attention_q8.cpp). A lane does exactly what the same lane of the AVX2 form does; the wider
// register holds two keys (scores) or 16 more values (the accumulations), never a different
// order within one output.
//
//   scores             two keys per register: a key's block fills one 256-bit half, its query
//                      block is broadcast to both; VNNI's vpdpbusd gives each 32-bit lane the
//                      sum of its four byte products, the integers maddubs + madd give there
//                      (|q| <= 127: no 16-bit saturation on that path)
//   accumulate_heads   two blocks (64 values, four registers) of each item per pass, a V block
//                      dequantized once for every item
//   accumulate         32 values in two registers
// The scores and accumulate_heads prefetch the rows eight keys ahead (prefetch_rows).
#include <algorithm>

#include "gpu/cpu/attention_kernels.hpp"
#include "gpu/cpu/attention_q8_kernels.hpp"
#include "gpu/cpu/isa_target.hpp"

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

// Blocks [first, first + blocks) of rows [begin, end) towards L1. A chunk's rows jump to another
// page every 16 keys (block tables scatter pages), which the hardware prefetcher learns too late;
// asked for eight keys ahead, their misses overlap this group's arithmetic (bench/
// attention_q8_bench: without it the AVX-512 set took about 0.95 of the AVX2 set's time, with
// it 0.70).
TROUPE_TARGET_AVX512 inline void prefetch_rows(const BlockQ8_0* const* rows, int32_t begin,
                                               int32_t end, int32_t first, int32_t blocks) {
  const auto bytes = static_cast<int32_t>(sizeof(BlockQ8_0)) * blocks;
  for (int32_t j = begin; j < end; ++j) {
    const char* from = reinterpret_cast<const char*>(rows[j] + first);
    for (int32_t at = 0; at < bytes; at += 64) _mm_prefetch(from + at, _MM_HINT_T0);
    _mm_prefetch(from + bytes - 1, _MM_HINT_T0);  // the last line (rows straddle lines)
  }
}

// scores_avx2's sums, two keys at a time: each (key, head) pair sums its blocks in the same
// eight lanes, in the same order, then the eight keys' lane sums of a head are reduced together
// (hsum8_x8) and scaled, as there.
TROUPE_TARGET_AVX512 void scores_avx512(const BlockQ8_0* const* rows, int32_t n, const BlockQ8_0* q,
                                        int32_t heads, int32_t blocks, float scale, float* s) {
  constexpr int32_t kHeads = 4;
  const __m256 by = _mm256_set1_ps(scale);
  for (int32_t h0 = 0; h0 < heads; h0 += kHeads) {
    const int32_t hn = std::min(kHeads, heads - h0);
    for (int32_t i0 = 0; i0 < n; i0 += 8) {
      const int32_t m = std::min(8, n - i0);
      prefetch_rows(rows, i0 + 8, std::min(n, i0 + 16), 0, blocks);
      alignas(64) float lanes[kHeads][8][8];
      for (int32_t j = 0; j < m; j += 2) {
        // An odd last key is paired with itself; its twin's sums land in an unread slot.
        const BlockQ8_0* lo = rows[i0 + j];
        const BlockQ8_0* hi = rows[i0 + std::min(j + 1, m - 1)];
        __m512 acc[kHeads];
        for (int32_t h = 0; h < kHeads; ++h) acc[h] = _mm512_setzero_ps();
        for (int32_t b = 0; b < blocks; ++b) {
          const __m512i qx = pair_of(lo[b].qs, hi[b].qs);
          const __m512i ax = _mm512_abs_epi8(qx);
          const __mmask64 negative = _mm512_movepi8_mask(qx);
          const float dlo = _cvtsh_ss(lo[b].d), dhi = _cvtsh_ss(hi[b].d);
          for (int32_t h = 0; h < hn; ++h) {
            const BlockQ8_0& qb = q[(h0 + h) * blocks + b];
            const __m512i qy =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb.qs)));
            // sign(qy, qx): qy where qx > 0, -qy where qx < 0 (where qx is 0 the product is 0
            // either way).
            const __m512i sy = _mm512_mask_sub_epi8(qy, negative, _mm512_setzero_si512(), qy);
            const __m512 products =
                _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ax, sy));
            const float dq = _cvtsh_ss(qb.d);
            const __m512 d =
                _mm512_insertf32x8(_mm512_set1_ps(dlo * dq), _mm256_set1_ps(dhi * dq), 1);
            acc[h] = _mm512_fmadd_ps(d, products, acc[h]);
          }
        }
        for (int32_t h = 0; h < hn; ++h) _mm512_store_ps(lanes[h][j], acc[h]);
      }
      for (int32_t h = 0; h < hn; ++h) {
        __m256 acc[8];
        for (int32_t j = 0; j < 8; ++j)
          acc[j] = j < m ? _mm256_load_ps(lanes[h][j]) : _mm256_setzero_ps();
        float out[8];
        _mm256_storeu_ps(out, _mm256_mul_ps(hsum8_x8(acc), by));
        std::copy_n(out, m, s + (h0 + h) * kQ8KeyChunk + i0);
      }
    }
  }
}

// 16 values of a block: float(q) * d.
TROUPE_TARGET_AVX512 inline __m512 dequantize_half(const BlockQ8_0& x, int half, __m512 d) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qs + 16 * half));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d);
}

// accumulate_heads_avx2's order per value: each item's accumulator is rescaled where a key is a
// new maximum and takes fma(V, weight) key after key. `width` blocks (1 or 2) per pass.
template <int32_t kWidth>
TROUPE_TARGET_AVX512 void accumulate_pass(float* const* acc, int32_t h0, int32_t hn, int32_t b,
                                          const BlockQ8_0* const* rows, int32_t n, const float* ms,
                                          const float* vs, bool any_rescaled) {
  constexpr int32_t kRegs = 2 * kWidth;
  __m512 a[3][kRegs];
  for (int32_t h = 0; h < hn; ++h) {
    for (int32_t r = 0; r < kRegs; ++r) a[h][r] = _mm512_loadu_ps(acc[h0 + h] + b * kQk + 16 * r);
  }
  for (int32_t i = 0; i < n; ++i) {
    if (i + 8 < n) prefetch_rows(rows, i + 8, i + 9, b, kWidth);
    __m512 v[kRegs];
    for (int32_t w = 0; w < kWidth; ++w) {
      const BlockQ8_0& x = rows[i][b + w];
      const __m512 d = _mm512_set1_ps(_cvtsh_ss(x.d));
      v[2 * w] = dequantize_half(x, 0, d);
      v[2 * w + 1] = dequantize_half(x, 1, d);
    }
    for (int32_t h = 0; h < hn; ++h) {
      const float m = ms[(h0 + h) * kQ8KeyChunk + i];
      if (any_rescaled && m != 1.0f) {
        const __m512 mm = _mm512_set1_ps(m);
        for (int32_t r = 0; r < kRegs; ++r) a[h][r] = _mm512_mul_ps(a[h][r], mm);
      }
      const __m512 weight = _mm512_set1_ps(vs[(h0 + h) * kQ8KeyChunk + i]);
      for (int32_t r = 0; r < kRegs; ++r) a[h][r] = _mm512_fmadd_ps(v[r], weight, a[h][r]);
    }
  }
  for (int32_t h = 0; h < hn; ++h) {
    for (int32_t r = 0; r < kRegs; ++r) _mm512_storeu_ps(acc[h0 + h] + b * kQk + 16 * r, a[h][r]);
  }
}

TROUPE_TARGET_AVX512 void accumulate_heads_avx512(float* const* acc, int32_t items,
                                                  const BlockQ8_0* const* rows, int32_t n,
                                                  int32_t blocks, const float* ms, const float* vs,
                                                  const bool* rescaled) {
  for (int32_t h0 = 0; h0 < items; h0 += 3) {
    const int32_t hn = std::min<int32_t>(3, items - h0);
    bool any_rescaled = false;
    for (int32_t h = 0; h < hn; ++h) any_rescaled = any_rescaled || rescaled[h0 + h];
    int32_t b = 0;
    for (; b + 2 <= blocks; b += 2)
      accumulate_pass<2>(acc, h0, hn, b, rows, n, ms, vs, any_rescaled);
    if (b < blocks) accumulate_pass<1>(acc, h0, hn, b, rows, n, ms, vs, any_rescaled);
  }
}

// accumulate_avx2's order, 32 values (two registers) at a time across all n keys.
TROUPE_TARGET_AVX512 void accumulate_avx512(float* acc, const float* values, int32_t n,
                                            int32_t head_dim, const float* ms, const float* vs,
                                            bool rescaled) {
  for (int32_t c = 0; c < head_dim; c += kQk) {
    __m512 a[2];
    for (int j = 0; j < 2; ++j) a[j] = _mm512_loadu_ps(acc + c + 16 * j);
    for (int32_t i = 0; i < n; ++i) {
      if (rescaled && ms[i] != 1.0f) {
        const __m512 m = _mm512_set1_ps(ms[i]);
        for (int j = 0; j < 2; ++j) a[j] = _mm512_mul_ps(a[j], m);
      }
      const __m512 v = _mm512_set1_ps(vs[i]);
      const float* row = values + static_cast<int64_t>(i) * head_dim + c;
      for (int j = 0; j < 2; ++j) a[j] = _mm512_fmadd_ps(_mm512_loadu_ps(row + 16 * j), v, a[j]);
    }
    for (int j = 0; j < 2; ++j) _mm512_storeu_ps(acc + c + 16 * j, a[j]);
  }
}

}  // namespace

Q8Kernels q8_avx512_kernels(bool vector_expf) {
  Q8Kernels k = q8_avx2_kernels(vector_expf);
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
