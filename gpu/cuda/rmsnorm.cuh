// RMSNorm of rows of the F32 residual stream, as ggml computes it (the CPU reference,
// gpu/cpu/rmsnorm.cpp): sum of squares in double, mean rounded to float, scale = 1/sqrtf(mean +
// eps), out = (x * scale) * weight. Writes F32 (out_f32) or the GEMM activation type (out_act),
// or adds to F32 rows (add_to_out: gemma3's post-attention and post-FFN norms, whose output joins
// the residual stream as the CPU's `x[j] += t[j]` after the norm).
//
// Thread-safety: enqueues on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda/kernel_types.cuh"

namespace troupe::gpu::cuda {

struct RmsNormArgs {
  const float* x = nullptr;           // rows of n floats, ld_x apart
  int64_t ld_x = 0;
  const int32_t* row_index = nullptr;  // output row r reads input row row_index[r]; null: r
  int32_t num_rows = 0;
  const float* weight = nullptr;       // [n]
  int32_t n = 0;
  float eps = 1e-5f;
  float* out_f32 = nullptr;            // exactly one of out_f32 / out_act
  bool add_to_out = false;             // out_f32[j] += y instead of out_f32[j] = y
  void* out_act = nullptr;
  ActType act_type = ActType::kF16;
  int64_t ld_out = 0;
};

void rmsnorm_rows(const RmsNormArgs& args, cudaStream_t stream);

}  // namespace troupe::gpu::cuda
