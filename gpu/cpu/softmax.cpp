// Softmax kernels (see softmax.hpp).
#include "gpu/cpu/softmax.hpp"

#include <cmath>
#include <limits>

#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/vec_math.hpp"

namespace troupe::gpu::cpu {
namespace {

#if TROUPE_X86
TROUPE_TARGET_AVX512 float exp_shifted_avx512(float* x, int64_t n, float max_value) {
  const __m512 mx = _mm512_set1_ps(max_value);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m =
        n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mx));
    _mm512_mask_storeu_ps(x + i, m, e);
    acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(m, e));
  }
  return _mm512_reduce_add_ps(acc);
}
#endif

}  // namespace

float max_value(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

float exp_shifted(float* x, int64_t n, float max_value, IsaLevel isa) {
#if TROUPE_X86
  if (isa == IsaLevel::kAvx512Vnni) return exp_shifted_avx512(x, n, max_value);
#endif
  (void)isa;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_value);
    sum += x[i];
  }
  return sum;
}

float softmax(float* x, int64_t n, IsaLevel isa) {
  const float sum = exp_shifted(x, n, max_value(x, n), isa);
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
  return sum;
}

float softmax_reference(float* x, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - m);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(std::exp(x[i] - m) / sum);
  return static_cast<float>(sum);
}

}  // namespace troupe::gpu::cpu
