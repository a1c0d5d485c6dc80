// Embedding gather: for each token, its row of token_embd (kept in its GGUF type on the device)
// dequantized to F32, the residual stream's type.
//
// Thread-safety: enqueues on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda/kernel_types.cuh"

namespace troupe::gpu::cuda {

// table: n_vocab rows of n_embd elements of `type`, row_bytes apart. out: [num_tokens][n_embd],
// each value times `scale` in F32 (gemma3: sqrt(n_embd), LlamaConfig::embedding_scale; x * 1.0f
// is x, so the llama family's 1 changes nothing).
void embedding_gather(const void* table, WeightType type, int64_t row_bytes, int32_t n_embd,
                      const int32_t* token_ids, int32_t num_tokens, float* out,
                      cudaStream_t stream, float scale = 1.0f);

}  // namespace troupe::gpu::cuda
