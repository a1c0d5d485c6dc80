// Vectorized exp for the AVX-512 kernels (softmax, SiLU).
//
// Cody-Waite range reduction and a degree-6 polynomial: relative error below 2 ulp over the
// range softmax and SiLU use; inputs below -87.3 give 0, above 88.7 give +inf. Every row goes
// through the same code, so results stay batch-invariant.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "gpu/cpu/cpu_features.hpp"
#include "model/fp16.hpp"
#include "gpu/cpu/isa_target.hpp"

namespace troupe::gpu::cpu {

// The 8-lane horizontal sum of ggml's AVX2 code (hsum_float_8 / tinyBLAS hsum):
// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)). The scalar and vector forms give the same
// bits; every kernel that reproduces an AVX2 reduction of llama.cpp ends with one of them.
inline float hsum8(const float* a) {
  const float v0 = a[0] + a[4], v1 = a[1] + a[5], v2 = a[2] + a[6], v3 = a[3] + a[7];
  return (v0 + v2) + (v1 + v3);
}

#if TROUPE_X86
TROUPE_TARGET_AVX2 inline float hsum8_avx2(__m256 x) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// The sum of 8 int32 lanes (exact: any order gives the same sum).
TROUPE_TARGET_AVX2 inline int32_t hsum_epi32_avx2(__m256i v) {
  __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtsi128_si32(r);
}
#endif

// ggml's vectorized expf (ggml_v_expf, from ARM's optimized-routines v_expf), one lane at a
// time: the operations and constants of ggml-cpu's AVX2/AVX-512 code, each an IEEE fma or
// multiply, so this scalar form is bit-identical to the SIMD one below. llama.cpp's softmax
// and SiLU go through it; using the same function is what keeps our activations bit-equal.
inline float ggml_expf(float x) {
  const auto bits = [](float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; };
  const auto from = [](uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; };
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const uint32_t e = bits(z) << 23;
  const float k = from(e + bits(1.0f));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, 0x1.ffffecp-1f * b);
  if (!(std::fabs(n) > 126.0f)) return std::fma(j, k, k);
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = from(g + 0x7f000000u);
  const float s2 = from(e - g);
  if (std::fabs(n) > 192.0f) return s1 * s1;
  return std::fma(s2, j, s2) * s1;
}

// ggml's SiLU: x / (1 + expf(-x)) with ggml_expf.
inline float ggml_silu(float x) { return x / (1.0f + ggml_expf(0.0f - x)); }

#if TROUPE_X86
// ggml_expf on 8 lanes: ggml-cpu's AVX2 ggml_v_expf, the same operations as the scalar form.
TROUPE_TARGET_AVX2 inline __m256 ggml_expf256(__m256 x) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
  const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
  const __m256 c = _mm256_cmp_ps(abs_n, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
  const __m256 fast = _mm256_fmadd_ps(j, k, k);
  if (_mm256_movemask_ps(c) == 0) return fast;
  const __m256i g = _mm256_and_si256(
      _mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
      _mm256_set1_epi32(static_cast<int>(0x82000000u)));
  const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
  const __m256 d = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
  const __m256 mid = _mm256_blendv_ps(fast, _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1), c);
  return _mm256_blendv_ps(mid, _mm256_mul_ps(s1, s1), d);
}
#endif

#if TROUPE_X86
TROUPE_TARGET_AVX512 inline __m512 exp512(__m512 x) {
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693359375f);
  const __m512 ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
  x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
  r = _mm512_fnmadd_ps(n, ln2_lo, r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  // scalef computes p * 2^n and handles the exponent range (overflow to inf, underflow to 0).
  return _mm512_scalef_ps(p, n);
}

// ggml_expf on 16 lanes (same operations as the scalar form).
TROUPE_TARGET_AVX512 inline __m512 ggml_expf512(__m512 x) {
  const __m512 r = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
  const __m512 n = _mm512_sub_ps(z, r);
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __m512i e = _mm512_slli_epi32(_mm512_castps_si512(z), 23);
  const __m512 k = _mm512_castsi512_ps(_mm512_add_epi32(e, _mm512_castps_si512(_mm512_set1_ps(1.0f))));
  const __m512 abs_n = _mm512_abs_ps(n);
  const __mmask16 c = _mm512_cmp_ps_mask(abs_n, _mm512_set1_ps(126.0f), _CMP_GT_OQ);
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 j = _mm512_fmadd_ps(
      _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                      _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
      u, _mm512_mul_ps(_mm512_set1_ps(0x1.ffffecp-1f), b));
  const __m512 fast = _mm512_fmadd_ps(j, k, k);
  if (c == 0) return fast;
  const __mmask16 nonpos = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
  const __m512i g = _mm512_maskz_mov_epi32(nonpos, _mm512_set1_epi32(static_cast<int>(0x82000000u)));
  const __m512 s1 = _mm512_castsi512_ps(_mm512_add_epi32(g, _mm512_set1_epi32(0x7f000000)));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_sub_epi32(e, g));
  const __mmask16 d = _mm512_cmp_ps_mask(abs_n, _mm512_set1_ps(192.0f), _CMP_GT_OQ);
  __m512 out = _mm512_mask_mov_ps(fast, c, _mm512_mul_ps(_mm512_fmadd_ps(s2, j, s2), s1));
  return _mm512_mask_mov_ps(out, d, _mm512_mul_ps(s1, s1));
}

TROUPE_TARGET_AVX512 inline float reduce_add512(__m512 v) { return _mm512_reduce_add_ps(v); }
#endif

#if TROUPE_X86
// fp16 conversions of a row with F16C (vcvtps2ph, round to nearest even), which fp32_to_fp16
// matches bit for bit except for NaN payloads: groups holding a NaN take the scalar form.
TROUPE_TARGET_AVX2 inline void store_fp16_avx2(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
      for (int64_t j = i; j < i + 8; ++j) out[j] = model::fp32_to_fp16(x[j]);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = model::fp32_to_fp16(x[i]);
}

TROUPE_TARGET_AVX2 inline void round_to_fp16_avx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
      for (int64_t j = i; j < i + 8; ++j) x[j] = model::fp16_to_fp32(model::fp32_to_fp16(x[j]));
      continue;
    }
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)));
  }
  for (; i < n; ++i) x[i] = model::fp16_to_fp32(model::fp32_to_fp16(x[i]));
}
#endif

// out[i] = model::fp32_to_fp16(x[i]), at `isa`.
inline void store_fp16(const float* x, uint16_t* out, int64_t n, IsaLevel isa) {
#if TROUPE_X86
  if (isa != IsaLevel::kScalar) return store_fp16_avx2(x, out, n);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = model::fp32_to_fp16(x[i]);
}

// x[i] = model::fp16_to_fp32(model::fp32_to_fp16(x[i])), at `isa`.
inline void round_to_fp16(float* x, int64_t n, IsaLevel isa) {
#if TROUPE_X86
  if (isa != IsaLevel::kScalar) return round_to_fp16_avx2(x, n);
#endif
  for (int64_t i = 0; i < n; ++i) x[i] = model::fp16_to_fp32(model::fp32_to_fp16(x[i]));
}

}  // namespace troupe::gpu::cpu
