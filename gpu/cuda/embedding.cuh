// Embedding gather: for each token, its row of token_embd (kept in its GGUF type on the device)
// dequantized to F32, the residual stream's type.
//
// Thread-safety: enqueues on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda/kernel_types.cuh"

namespace troupe::gpu::cuda {

// table: n_vocab rows of n_embd elements of `type`, row_bytes apart. out: [num_tokens][n_embd].
void embedding_gather(const void* table, WeightType type, int64_t row_bytes, int32_t n_embd,
                      const int32_t* token_ids, int32_t num_tokens, float* out,
                      cudaStream_t stream);

}  // namespace troupe::gpu::cuda
