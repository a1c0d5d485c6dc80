// The q8_0 cache's AVX2 kernels (attention_q8_kernels.hpp), each giving its scalar twin's bits
// (attention_q8.cpp): the same operations per output, in the same order; vector lanes hold
// independent values or independent keys.
#include <algorithm>

#include "gpu/cpu/attention_kernels.hpp"
#include "gpu/cpu/attention_q8_kernels.hpp"
#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/libm_expf.hpp"
#include "gpu/cpu/vec_math.hpp"
#include "model/fp16.hpp"

namespace troupe::gpu::cpu::detail {

#if TROUPE_X86
namespace {

constexpr int32_t kQk = kQ8Block;

// round-half-even(v * mul) as int32.
TROUPE_TARGET_AVX2 inline __m256i scaled_ints(__m256 v, __m256 mul) {
  return _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v, mul), _MM_ROUND_NEAREST));
}

// ggml's x86 quantize_row_q8_0 for one block.
TROUPE_TARGET_AVX2 void quantize_block_avx2(const float* x, BlockQ8_0& out) {
  __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
  __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_andnot_ps(sign, v0);
  amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v1));
  amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v2));
  amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v3));
  __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float m = _mm_cvtss_f32(m4);
  out.d = model::fp32_to_fp16(m / 127.0f);
  const __m256 mul = _mm256_set1_ps(m != 0.0f ? 127.0f / m : 0.0f);
  const __m256i i01 = _mm256_packs_epi32(scaled_ints(v0, mul), scaled_ints(v1, mul));
  const __m256i i23 = _mm256_packs_epi32(scaled_ints(v2, mul), scaled_ints(v3, mul));
  const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(i01, i23),
                                                    _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.qs), bytes);
}

// Lane j: float(x[4j]y[4j] + ... + x[4j+3]y[4j+3]), as ggml's mul_sum_i8_pairs_float.
TROUPE_TARGET_AVX2 inline __m256 products_avx2(const int8_t* x, const int8_t* y) {
  const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y));
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

TROUPE_TARGET_AVX2 float dot_avx2(const BlockQ8_0* x, const BlockQ8_0* y, int32_t blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int32_t b = 0; b < blocks; ++b) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(x[b].d) * _cvtsh_ss(y[b].d));
    acc = _mm256_fmadd_ps(d, products_avx2(x[b].qs, y[b].qs), acc);
  }
  return hsum8_avx2(acc);
}

// n % 8 == 0 (n is head_dim, a multiple of 32 here).
TROUPE_TARGET_AVX2 void scale_avx2(float* acc, int32_t n, float by) {
  const __m256 b = _mm256_set1_ps(by);
  for (int32_t i = 0; i < n; i += 8) _mm256_storeu_ps(acc + i, _mm256_mul_ps(_mm256_loadu_ps(acc + i), b));
}

// dot_avx2 for up to 8 keys and up to 4 query heads at once: a key block is loaded, and its
// |K| and scale taken, once for all the heads; each (key, head) pair still sums its blocks in
// dot_avx2's lanes and order, and the 8 keys' lane sums of a head are reduced together (hsum8_x8
// gives each one hsum8's order), then scaled.
TROUPE_TARGET_AVX2 void scores_avx2(const BlockQ8_0* const* rows, int32_t n, const BlockQ8_0* q,
                                    int32_t heads, int32_t blocks, float scale, float* s,
                                    const Q8Ahead& ahead) {
  constexpr int32_t kHeads = 4;
  const __m256 by = _mm256_set1_ps(scale);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int32_t h0 = 0; h0 < heads; h0 += kHeads) {
    const int32_t hn = std::min(kHeads, heads - h0);
    for (int32_t i0 = 0; i0 < n; i0 += 8) {
      const int32_t m = std::min(8, n - i0);
      alignas(32) float lanes[kHeads][8][8];
      for (int32_t j = 0; j < m; ++j) {
        if (h0 == 0) prefetch_ahead(ahead, i0 + j, blocks);
        __m256 acc[kHeads];
        for (int32_t h = 0; h < kHeads; ++h) acc[h] = _mm256_setzero_ps();
        const BlockQ8_0* row = rows[i0 + j];
        for (int32_t b = 0; b < blocks; ++b) {
          const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[b].qs));
          const __m256i ax = _mm256_sign_epi8(qx, qx);
          const float dk = _cvtsh_ss(row[b].d);
          for (int32_t h = 0; h < hn; ++h) {
            const BlockQ8_0& qb = q[(h0 + h) * blocks + b];
            const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb.qs));
            const __m256i pairs = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(qy, qx));
            const __m256 products = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
            acc[h] = _mm256_fmadd_ps(_mm256_set1_ps(dk * _cvtsh_ss(qb.d)), products, acc[h]);
          }
        }
        for (int32_t h = 0; h < hn; ++h) _mm256_store_ps(lanes[h][j], acc[h]);
      }
      for (int32_t h = 0; h < hn; ++h) {
        __m256 acc[8];
        for (int32_t j = 0; j < 8; ++j) acc[j] = j < m ? _mm256_load_ps(lanes[h][j]) : _mm256_setzero_ps();
        float out[8];
        _mm256_storeu_ps(out, _mm256_mul_ps(hsum8_x8(acc), by));
        std::copy_n(out, m, s + (h0 + h) * kQ8KeyChunk + i0);
      }
    }
  }
}

// One 32-value block: float(q) * d, four registers.
TROUPE_TARGET_AVX2 inline void dequantize_block(const BlockQ8_0& x, __m256* v) {
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(x.d));
  for (int j = 0; j < 4; ++j) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x.qs + 8 * j));
    v[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
  }
}

TROUPE_TARGET_AVX2 void dequantize_rows_avx2(const BlockQ8_0* const* rows, int32_t n,
                                             int32_t blocks, float* out) {
  for (int32_t i = 0; i < n; ++i) {
    for (int32_t b = 0; b < blocks; ++b) {
      __m256 v[4];
      dequantize_block(rows[i][b], v);
      float* o = out + (static_cast<int64_t>(i) * blocks + b) * kQk;
      for (int j = 0; j < 4; ++j) _mm256_storeu_ps(o + 8 * j, v[j]);
    }
  }
}

// softmax_scalar's values: per item the running maximum and each key's expf argument (the
// scalar chain of compares), then every expf eight at a time in libm's own arithmetic
// (libm_expf.hpp), then the sums' fma chains, the items' interleaved (each its own dependent
// chain).
TROUPE_TARGET_AVX2 void softmax_avx2(float* const* states, int32_t items, const float* s,
                                     int32_t n, float* ms, float* vs, bool* rescaled) {
  const int32_t padded = (n + 7) / 8 * 8;
  for (int32_t item = 0; item < items; ++item) {
    const float* si = s + item * kQ8KeyChunk;
    float* arg = ms + item * kQ8KeyChunk;  // the arguments, then the factors, in place
    float* flag = vs + item * kQ8KeyChunk;  // 1 where a new maximum
    float m = states[item][0];
    for (int32_t i = 0; i < n; ++i) {
      const bool new_max = si[i] > m;
      arg[i] = new_max ? m - si[i] : si[i] - m;
      flag[i] = new_max ? 1.0f : 0.0f;
      if (new_max) m = si[i];
    }
    for (int32_t i = n; i < padded; ++i) arg[i] = 0.0f;
    states[item][0] = m;
    const __m256 one = _mm256_set1_ps(1.0f);
    bool rescale = false;
    for (int32_t i = 0; i < padded; i += 8) {
      const __m256 e = libm_expf_x8_avx2(_mm256_loadu_ps(arg + i));
      const __m256 is_max = _mm256_cmp_ps(_mm256_loadu_ps(flag + i), one, _CMP_EQ_OQ);
      const __m256 scale = _mm256_blendv_ps(one, e, is_max);
      _mm256_storeu_ps(arg + i, scale);
      _mm256_storeu_ps(flag + i, _mm256_blendv_ps(e, one, is_max));
      rescale = rescale || _mm256_movemask_ps(_mm256_cmp_ps(scale, one, _CMP_NEQ_OQ)) != 0;
    }
    rescaled[item] = rescale;
  }
  __m128 sum[kQ8MaxItems];
  for (int32_t item = 0; item < items; ++item) sum[item] = _mm_set_ss(states[item][1]);
  for (int32_t i = 0; i < n; ++i) {
    for (int32_t item = 0; item < items; ++item) {
      sum[item] = _mm_fmadd_ss(sum[item], _mm_set_ss(ms[item * kQ8KeyChunk + i]),
                               _mm_set_ss(vs[item * kQ8KeyChunk + i]));
    }
  }
  for (int32_t item = 0; item < items; ++item) states[item][1] = _mm_cvtss_f32(sum[item]);
}

// accumulate_scalar's order, each item's 32 values (4 registers) at a time across all n keys.
TROUPE_TARGET_AVX2 void accumulate_avx2(float* const* acc, int32_t items, const float* values,
                                        int32_t n, int32_t head_dim, const float* ms,
                                        const float* vs, const bool* rescaled) {
  for (int32_t item = 0; item < items; ++item) {
    const float* msi = ms + item * kQ8KeyChunk;
    const float* vsi = vs + item * kQ8KeyChunk;
    for (int32_t c = 0; c < head_dim; c += kQk) {
      float* out = acc[item] + c;
      __m256 a[4];
      for (int j = 0; j < 4; ++j) a[j] = _mm256_loadu_ps(out + 8 * j);
      for (int32_t i = 0; i < n; ++i) {
        if (rescaled[item] && msi[i] != 1.0f) {
          const __m256 m = _mm256_set1_ps(msi[i]);
          for (int j = 0; j < 4; ++j) a[j] = _mm256_mul_ps(a[j], m);
        }
        const __m256 v = _mm256_set1_ps(vsi[i]);
        const float* row = values + static_cast<int64_t>(i) * head_dim + c;
        for (int j = 0; j < 4; ++j) a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(row + 8 * j), v, a[j]);
      }
      for (int j = 0; j < 4; ++j) _mm256_storeu_ps(out + 8 * j, a[j]);
    }
  }
}

// accumulate_heads_scalar's order with each 32-value block of up to three items' accumulators
// in registers across the chunk's keys: a V block is dequantized once for all of them.
TROUPE_TARGET_AVX2 void accumulate_heads_avx2(float* const* acc, int32_t items,
                                              const BlockQ8_0* const* rows, int32_t n,
                                              int32_t blocks, const float* ms, const float* vs,
                                              const bool* rescaled) {
  for (int32_t h0 = 0; h0 < items; h0 += 3) {
    const int32_t hn = std::min<int32_t>(3, items - h0);
    bool any_rescaled = false;
    for (int32_t h = 0; h < hn; ++h) any_rescaled = any_rescaled || rescaled[h0 + h];
    for (int32_t b = 0; b < blocks; ++b) {
      __m256 a[3][4];
      for (int32_t h = 0; h < hn; ++h) {
        for (int j = 0; j < 4; ++j) a[h][j] = _mm256_loadu_ps(acc[h0 + h] + b * kQk + 8 * j);
      }
      for (int32_t i = 0; i < n; ++i) {
        __m256 v[4];
        dequantize_block(rows[i][b], v);
        for (int32_t h = 0; h < hn; ++h) {
          const float m = ms[(h0 + h) * kQ8KeyChunk + i];
          if (any_rescaled && m != 1.0f) {
            const __m256 mm = _mm256_set1_ps(m);
            for (int j = 0; j < 4; ++j) a[h][j] = _mm256_mul_ps(a[h][j], mm);
          }
          const __m256 w = _mm256_set1_ps(vs[(h0 + h) * kQ8KeyChunk + i]);
          for (int j = 0; j < 4; ++j) a[h][j] = _mm256_fmadd_ps(v[j], w, a[h][j]);
        }
      }
      for (int32_t h = 0; h < hn; ++h) {
        for (int j = 0; j < 4; ++j) _mm256_storeu_ps(acc[h0 + h] + b * kQk + 8 * j, a[h][j]);
      }
    }
  }
}

}  // namespace

Q8Kernels q8_avx2_kernels(bool vector_expf) {
  return {quantize_block_avx2,
          dot_avx2,
          scale_avx2,
          scores_avx2,
          dequantize_rows_avx2,
          vector_expf ? softmax_avx2 : q8_scalar_kernels().softmax,
          accumulate_avx2,
          accumulate_heads_avx2};
}
#else
Q8Kernels q8_avx2_kernels(bool) { return q8_scalar_kernels(); }
#endif

}  // namespace troupe::gpu::cpu::detail
