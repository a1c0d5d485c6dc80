// GEGLU activation (gemma3's feed-forward): out = gelu_tanh(gate) * up, with gate and up the two
// halves of each row of the fused gate/up GEMM output (F32), out in the activation type that feeds
// the down projection. Computed as the CPU twin computes it (gpu/cpu/geglu.hpp), bit for bit:
// z <= -10 gives 0, z >= 10 gives z * up, otherwise ggml's fp16 GELU table at fp16(z) (round to
// nearest even) times up. The table is the CPU's (cpu::gelu_fp16_table_entry, 65,536 fp16 words),
// uploaded once by the caller, so both backends read the same words.
//
// Thread-safety: enqueues on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda/kernel_types.cuh"

namespace troupe::gpu::cuda {

// gate_up: [num_tokens][2 * n_ff] (gate then up). gelu_table: device copy of the 65,536 table
// words. out: [num_tokens][n_ff] of `out_type`, or F32 when out_f32 is set (tests).
void geglu_mul(const float* gate_up, int32_t num_tokens, int32_t n_ff, const uint16_t* gelu_table,
               void* out, ActType out_type, bool out_f32, cudaStream_t stream);

}  // namespace troupe::gpu::cuda
