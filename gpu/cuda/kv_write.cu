// Paged KV write (see kv_write.cuh).
#include "gpu/cuda/kv_write.cuh"

#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/device_util.cuh"

namespace troupe::gpu::cuda {
namespace {

__global__ void kv_write_kernel(KvWriteArgs a) {
  const int32_t t = blockIdx.x;
  const int32_t slot = a.slot_mapping[t];
  const int64_t block = slot / a.block_size, offset = slot % a.block_size;
  const float* row = a.qkv + static_cast<int64_t>(t) * a.ld;
  __half* k_cache = static_cast<__half*>(a.k_cache);
  __half* v_cache = static_cast<__half*>(a.v_cache);
  const int32_t n = a.n_head_kv * a.head_dim;
  for (int32_t j = threadIdx.x; j < n; j += blockDim.x) {
    const int32_t h = j / a.head_dim, d = j % a.head_dim;
    const int64_t dst = ((block * a.n_head_kv + h) * a.block_size + offset) * a.head_dim + d;
    k_cache[dst] = __float2half_rn(row[a.k_column + j]);
    v_cache[dst] = __float2half_rn(row[a.v_column + j]);
  }
}

void launch_kv_write(const KvWriteArgs& args, cudaStream_t stream) {
  if (args.num_tokens == 0) return;
  kv_write_kernel<<<args.num_tokens, 256, 0, stream>>>(args);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void kv_write(const KvWriteArgs& args, cudaStream_t stream) { launch_kv_write(args, stream); }

}  // namespace troupe::gpu::cuda
