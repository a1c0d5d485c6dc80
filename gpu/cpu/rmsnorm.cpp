// RMSNorm kernels (see rmsnorm.hpp).
#include "gpu/cpu/rmsnorm.hpp"

#include <cmath>

#include "gpu/cpu/isa_target.hpp"

namespace troupe::gpu::cpu {
namespace {

// ggml's rms_norm: the squares (float products) summed in double, in order; mean rounded to
// float; scale = 1/sqrtf(mean + eps); out = (x * scale) * w (rms_norm then mul).
void scale_row(const float* x, const float* weight, float* out, int64_t n, double sum_of_squares,
               float eps) {
  const float mean = static_cast<float>(sum_of_squares / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) {
    const float y = x[i] * scale;
    out[i] = y * weight[i];
  }
}

#if TROUPE_X86
// Columns j of the 8 x 8 block r[0..7] (row k: 8 consecutive values of row k) into r[j].
TROUPE_TARGET_AVX512 inline void transpose8x8(__m256* r) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

TROUPE_TARGET_AVX512 inline __m512d add_column(__m512d acc, __m256 column) {
  return _mm512_add_pd(acc, _mm512_cvtps_pd(_mm256_mul_ps(column, column)));
}

// The sums of squares of 8 rows, lane k row k's chain: per value, the float square widened to
// double and added, in input order.
TROUPE_TARGET_AVX512 void sums_of_squares8(const float* x, int64_t ldx, int64_t n, double* sums) {
  __m512d acc = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 r[8];
    for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(x + k * ldx + i);
    transpose8x8(r);
    for (const __m256 column : r) acc = add_column(acc, column);
  }
  for (; i < n; ++i) {
    const __m256 column =
        _mm256_setr_ps(x[i], x[ldx + i], x[2 * ldx + i], x[3 * ldx + i], x[4 * ldx + i],
                       x[5 * ldx + i], x[6 * ldx + i], x[7 * ldx + i]);
    acc = add_column(acc, column);
  }
  _mm512_storeu_pd(sums, acc);
}
#endif

}  // namespace

void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps, IsaLevel isa) {
  (void)isa;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  scale_row(x, weight, out, n, sum, eps);
}

void rmsnorm_rows(const float* x, int64_t ldx, const float* weight, float* out, int64_t ldo,
                  int64_t rows, int64_t n, float eps, IsaLevel isa) {
  int64_t r = 0;
#if TROUPE_X86
  if (isa == IsaLevel::kAvx512Vnni) {
    static_assert(kRmsNormRows == 8, "sums_of_squares8 takes 8 rows");
    for (; r + kRmsNormRows <= rows; r += kRmsNormRows) {
      double sums[kRmsNormRows];
      sums_of_squares8(x + r * ldx, ldx, n, sums);
      // Every sum before any output: out may be x.
      for (int64_t k = 0; k < kRmsNormRows; ++k) {
        scale_row(x + (r + k) * ldx, weight, out + (r + k) * ldo, n, sums[k], eps);
      }
    }
  }
#endif
  for (; r < rows; ++r) rmsnorm(x + r * ldx, weight, out + r * ldo, n, eps, isa);
}

void rmsnorm_reference(const float* x, const float* weight, float* out, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const double scale = 1.0 / std::sqrt(sum / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] * scale * weight[i]);
}

}  // namespace troupe::gpu::cpu
