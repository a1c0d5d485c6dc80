// Embedding gather (see embedding.cuh).
#include "gpu/cuda/embedding.cuh"

#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/device_util.cuh"

namespace troupe::gpu::cuda {
namespace {

// One block per token; threads stride over the row.
__global__ void embedding_gather_kernel(const uint8_t* table, WeightType type, int64_t row_bytes,
                                        int32_t n_embd, const int32_t* token_ids, float* out,
                                        float scale) {
  const int32_t t = blockIdx.x;
  const uint8_t* row = table + static_cast<int64_t>(token_ids[t]) * row_bytes;
  float* dst = out + static_cast<int64_t>(t) * n_embd;
  for (int32_t j = threadIdx.x; j < n_embd; j += blockDim.x) {
    dst[j] = detail::load_weight_element(row, type, j) * scale;
  }
}

void launch_embedding_gather(const void* table, WeightType type, int64_t row_bytes,
                             int32_t n_embd, const int32_t* token_ids, int32_t num_tokens,
                             float* out, cudaStream_t stream, float scale) {
  if (num_tokens == 0) return;
  embedding_gather_kernel<<<num_tokens, 256, 0, stream>>>(static_cast<const uint8_t*>(table), type,
                                                          row_bytes, n_embd, token_ids, out, scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void embedding_gather(const void* table, WeightType type, int64_t row_bytes, int32_t n_embd,
                      const int32_t* token_ids, int32_t num_tokens, float* out,
                      cudaStream_t stream, float scale) {
  launch_embedding_gather(table, type, row_bytes, n_embd, token_ids, num_tokens, out, stream,
                          scale);
}

}  // namespace troupe::gpu::cuda
