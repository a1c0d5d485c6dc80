// expf in libm's arithmetic, eight lanes at a time (see libm_expf.hpp).
#include "gpu/cpu/libm_expf.hpp"

#include <bit>
#include <cmath>
#include <cstdint>

#include "gpu/cpu/cpu_features.hpp"

namespace troupe::gpu::cpu {
namespace {

// glibc's __exp2f_data as its expf reads it: T[i] = bits(2^(i/32)) - (i << 47).
alignas(64) constexpr uint64_t kTable[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540};
constexpr double kInvLn2N = 0x1.71547652b82fep+5;  // 32 / ln 2
constexpr double kShift = 0x1.8p+52;
constexpr double kC0 = 0x1.c6af84b912394p-20;
constexpr double kC1 = 0x1.ebfce50fac4f3p-13;
constexpr double kC2 = 0x1.62e42ff0c52d6p-6;
constexpr float kUnderflow = -0x1.9fe368p6f;     // below: 0
constexpr float kMayUnderflow = -0x1.9d1d9ep6f;  // below: the smallest subnormal

#if TROUPE_X86
TROUPE_TARGET_AVX2 inline __m128 expf_x4(__m128 x) {
  const __m256d xd = _mm256_cvtps_pd(x);
  const __m256d z = _mm256_fmadd_pd(xd, _mm256_set1_pd(kInvLn2N), _mm256_set1_pd(kShift));
  const __m256i ki = _mm256_castpd_si256(z);
  const __m256d kd = _mm256_sub_pd(z, _mm256_set1_pd(kShift));
  const __m256d r = _mm256_fmsub_pd(_mm256_set1_pd(kInvLn2N), xd, kd);
  const __m256i index = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
  const __m256i t = _mm256_add_epi64(
      _mm256_i64gather_epi64(reinterpret_cast<const long long*>(kTable), index, 8),
      _mm256_slli_epi64(ki, 47));
  const __m256d y0 = _mm256_fmadd_pd(r, _mm256_set1_pd(kC0), _mm256_set1_pd(kC1));
  const __m256d r2 = _mm256_mul_pd(r, r);
  const __m256d y1 = _mm256_fmadd_pd(r, _mm256_set1_pd(kC2), _mm256_set1_pd(1.0));
  const __m256d y = _mm256_mul_pd(_mm256_fmadd_pd(y0, r2, y1), _mm256_castsi256_pd(t));
  return _mm256_cvtpd_ps(y);
}

// expf_x4's operations on eight lanes; the table lookup is two two-register permutes (indices
// 0-15 and 16-31) and a blend on bit 4 instead of a gather.
TROUPE_TARGET_AVX512 inline __m256 expf_x8(__m256 x) {
  const __m512d xd = _mm512_cvtps_pd(x);
  const __m512d z = _mm512_fmadd_pd(xd, _mm512_set1_pd(kInvLn2N), _mm512_set1_pd(kShift));
  const __m512i ki = _mm512_castpd_si512(z);
  const __m512d kd = _mm512_sub_pd(z, _mm512_set1_pd(kShift));
  const __m512d r = _mm512_fmsub_pd(_mm512_set1_pd(kInvLn2N), xd, kd);
  const auto* table = reinterpret_cast<const double*>(kTable);
  const __m512d low = _mm512_permutex2var_pd(_mm512_load_pd(table), ki, _mm512_load_pd(table + 8));
  const __m512d high =
      _mm512_permutex2var_pd(_mm512_load_pd(table + 16), ki, _mm512_load_pd(table + 24));
  const __mmask8 upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
  const __m512i entry = _mm512_castpd_si512(_mm512_mask_blend_pd(upper, low, high));
  const __m512i t = _mm512_add_epi64(entry, _mm512_slli_epi64(ki, 47));
  const __m512d y0 = _mm512_fmadd_pd(r, _mm512_set1_pd(kC0), _mm512_set1_pd(kC1));
  const __m512d r2 = _mm512_mul_pd(r, r);
  const __m512d y1 = _mm512_fmadd_pd(r, _mm512_set1_pd(kC2), _mm512_set1_pd(1.0));
  const __m512d y = _mm512_mul_pd(_mm512_fmadd_pd(y0, r2, y1), _mm512_castsi512_pd(t));
  return _mm512_cvtpd_ps(y);
}
#endif

}  // namespace

#if TROUPE_X86
TROUPE_TARGET_AVX512 __m512 libm_expf_x16_avx512(__m512 x) {
  const __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(expf_x8(_mm512_castps512_ps256(x))),
                                      expf_x8(_mm512_extractf32x8_ps(x, 1)), 1);
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kMayUnderflow), _CMP_LT_OQ);
  const __mmask16 zero = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kUnderflow), _CMP_LT_OQ);
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~zero),
                             _mm512_mask_mov_ps(y, tiny, _mm512_castsi512_ps(_mm512_set1_epi32(1))));
}

TROUPE_TARGET_AVX2 __m256 libm_expf_x8_avx2(__m256 x) {
  __m256 y = _mm256_set_m128(expf_x4(_mm256_extractf128_ps(x, 1)),
                             expf_x4(_mm256_castps256_ps128(x)));
  const __m256 tiny = _mm256_castsi256_ps(_mm256_set1_epi32(1));
  y = _mm256_blendv_ps(y, tiny, _mm256_cmp_ps(x, _mm256_set1_ps(kMayUnderflow), _CMP_LT_OQ));
  return _mm256_blendv_ps(y, _mm256_setzero_ps(),
                          _mm256_cmp_ps(x, _mm256_set1_ps(kUnderflow), _CMP_LT_OQ));
}
#endif

#if TROUPE_X86
TROUPE_TARGET_AVX2 void libm_expf_avx2(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) _mm256_storeu_ps(y + i, libm_expf_x8_avx2(_mm256_loadu_ps(x + i)));
}
TROUPE_TARGET_AVX512 void libm_expf_avx512(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    _mm512_storeu_ps(y + i, libm_expf_x16_avx512(_mm512_loadu_ps(x + i)));
  }
}
#else
void libm_expf_avx2(const float*, float*, int64_t) {}
void libm_expf_avx512(const float*, float*, int64_t) {}
#endif

namespace {

// Whether `form` gives this process's expf on every 4099th float from 0 down past -104, the
// boundaries, and -inf (n: its lanes).
bool agrees_with_libm(void (*form)(const float*, float*, int64_t), int n) {
  float x[16], y[16];
  for (uint32_t bits = 0x80000000u; bits <= 0xC2D00000u; bits += 4099) {
    for (int i = 0; i < n; ++i) x[i] = std::bit_cast<float>(bits + static_cast<uint32_t>(i));
    form(x, y, n);
    for (int i = 0; i < n; ++i) {
      if (std::bit_cast<uint32_t>(y[i]) != std::bit_cast<uint32_t>(std::exp(x[i]))) return false;
    }
  }
  const float edge[8] = {-INFINITY, kUnderflow, kMayUnderflow, -88.0f, -87.5f, -0.0f, -1e-30f,
                         -103.5f};
  for (int i = 0; i < n; ++i) x[i] = edge[i % 8];
  form(x, y, n);
  for (int i = 0; i < n; ++i) {
    if (std::bit_cast<uint32_t>(y[i]) != std::bit_cast<uint32_t>(std::exp(x[i]))) return false;
  }
  return true;
}

}  // namespace

bool libm_expf_x8_agrees() {
  static const bool agrees =
      TROUPE_X86 && supported_isa() != IsaLevel::kScalar && agrees_with_libm(libm_expf_avx2, 8);
  return agrees;
}

bool libm_expf_x16_agrees() {
  static const bool agrees = TROUPE_X86 && supported_isa() >= IsaLevel::kAvx512Vnni &&
                             agrees_with_libm(libm_expf_avx512, 16);
  return agrees;
}

}  // namespace troupe::gpu::cpu
