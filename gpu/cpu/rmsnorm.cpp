// RMSNorm kernels (see rmsnorm.hpp).
#include "gpu/cpu/rmsnorm.hpp"

#include <cmath>

#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/vec_math.hpp"

namespace troupe::gpu::cpu {
namespace {

#if TROUPE_X86
TROUPE_TARGET_AVX512 void rmsnorm_avx512(const float* x, const float* w, float* out, int64_t n,
                                         float eps) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    acc = _mm512_fmadd_ps(v, v, acc);
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    acc = _mm512_fmadd_ps(v, v, acc);
  }
  const float mean = _mm512_reduce_add_ps(acc) / static_cast<float>(n);
  const __m512 scale = _mm512_set1_ps(1.0f / std::sqrt(mean + eps));
  for (i = 0; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), scale),
                                            _mm512_loadu_ps(w + i)));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), scale);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
  }
}
#endif

void rmsnorm_scalar(const float* x, const float* w, float* out, int64_t n, float eps) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum = std::fma(x[i], x[i], sum);
  const float scale = 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

}  // namespace

void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps, IsaLevel isa) {
#if TROUPE_X86
  if (isa == IsaLevel::kAvx512Vnni) return rmsnorm_avx512(x, weight, out, n, eps);
#endif
  (void)isa;
  rmsnorm_scalar(x, weight, out, n, eps);
}

void rmsnorm_reference(const float* x, const float* weight, float* out, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const double scale = 1.0 / std::sqrt(sum / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] * scale * weight[i]);
}

}  // namespace troupe::gpu::cpu
