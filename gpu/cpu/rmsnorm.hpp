// RMSNorm: out = x / sqrt(mean(x^2) + eps) * weight, one row at a time.
// Thread-safety: pure functions over caller-owned buffers.
#pragma once

#include <cstdint>

#include "gpu/cpu/cpu_features.hpp"

namespace troupe::gpu::cpu {

void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps, IsaLevel isa);
void rmsnorm_reference(const float* x, const float* weight, float* out, int64_t n, float eps);

}  // namespace troupe::gpu::cpu
