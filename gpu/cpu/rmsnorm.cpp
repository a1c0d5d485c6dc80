// RMSNorm kernels (see rmsnorm.hpp).
#include "gpu/cpu/rmsnorm.hpp"

#include <cmath>


namespace troupe::gpu::cpu {
// ggml's rms_norm: the squares (float products) summed in double, in order; mean rounded to
// float; scale = 1/sqrtf(mean + eps); out = (x * scale) * w (rms_norm then mul). Sequential and
// cheap next to the matmuls, so one form serves every ISA.
void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps, IsaLevel isa) {
  (void)isa;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) {
    const float y = x[i] * scale;
    out[i] = y * weight[i];
  }
}

void rmsnorm_reference(const float* x, const float* weight, float* out, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const double scale = 1.0 / std::sqrt(sum / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] * scale * weight[i]);
}

}  // namespace troupe::gpu::cpu
