// RMSNorm: out = x / sqrt(mean(x^2) + eps) * weight, per row.
// Thread-safety: pure functions over caller-owned buffers.
#pragma once

#include <cstdint>

#include "gpu/cpu/cpu_features.hpp"

namespace troupe::gpu::cpu {

void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps, IsaLevel isa);
void rmsnorm_reference(const float* x, const float* weight, float* out, int64_t n, float eps);

// `rows` rows of n values (row strides ldx and ldo; out may be x), each bit-identical to rmsnorm
// of that row. A row's sum of squares is one chain of dependent double additions in input order
// (ggml's); at AVX-512, groups of kRmsNormRows rows run their chains in the lanes of one vector,
// their inputs transposed 8 x 8, instead of five scalar operations per value and row.
inline constexpr int64_t kRmsNormRows = 8;
void rmsnorm_rows(const float* x, int64_t ldx, const float* weight, float* out, int64_t ldo,
                  int64_t rows, int64_t n, float eps, IsaLevel isa);

}  // namespace troupe::gpu::cpu
