// Softmax in place over one row: x[i] = exp(x[i] - max) / sum. Returns the sum of exp(x - max)
// (callers that need log-probabilities use log(sum) + max).
// Thread-safety: pure functions over caller-owned buffers.
#pragma once

#include <cstdint>

#include "gpu/cpu/cpu_features.hpp"

namespace troupe::gpu::cpu {

// Only exponentiates: x[i] = exp(x[i] - max_value); returns the sum. The attention kernel
// divides later, once per output.
float exp_shifted(float* x, int64_t n, float max_value, IsaLevel isa);

float max_value(const float* x, int64_t n);

// Full softmax; returns the sum before normalization.
float softmax(float* x, int64_t n, IsaLevel isa);
float softmax_reference(float* x, int64_t n);

}  // namespace troupe::gpu::cpu
