// SwiGLU activation: out = silu(gate) * up, with gate and up the two halves of each row of the
// fused gate/up GEMM output (F32), out in the activation type that feeds the down projection.
// silu(x) = x / (1 + exp(-x)), as ggml computes it.
//
// Thread-safety: enqueues on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda/kernel_types.cuh"

namespace troupe::gpu::cuda {

// gate_up: [num_tokens][2 * n_ff] (gate then up). out: [num_tokens][n_ff] of `out_type`, or F32
// when out_f32 is set (tests).
void silu_mul(const float* gate_up, int32_t num_tokens, int32_t n_ff, void* out, ActType out_type,
              bool out_f32, cudaStream_t stream);

}  // namespace troupe::gpu::cuda
