// SwiGLU gate: out[i] = silu(gate[i]) * up[i], silu(z) = z / (1 + exp(-z)).
// Thread-safety: pure functions over caller-owned buffers.
#pragma once

#include <cstdint>

#include "gpu/cpu/cpu_features.hpp"

namespace troupe::gpu::cpu {

void swiglu(const float* gate, const float* up, float* out, int64_t n, IsaLevel isa);
void swiglu_reference(const float* gate, const float* up, float* out, int64_t n);

}  // namespace troupe::gpu::cpu
