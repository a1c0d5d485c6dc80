// Paged KV write (see kv_write.cuh).
#include "gpu/cuda/kv_write.cuh"

#include <cuda_fp8.h>

#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/device_util.cuh"

namespace troupe::gpu::cuda {
namespace {

__device__ __forceinline__ void store_kv(__half* cache, int64_t at, float x, float) {
  cache[at] = __float2half_rn(x);
}

// A true division, as the CPU twin computes it (value / scale, then one rounding to E4M3).
__device__ __forceinline__ void store_kv(__nv_fp8_storage_t* cache, int64_t at, float x,
                                         float scale) {
  cache[at] = __nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3);
}

template <typename Element>
__global__ void kv_write_kernel(KvWriteArgs a) {
  const int32_t t = blockIdx.x;
  const int32_t slot = a.slot_mapping[t];
  const int64_t block = slot / a.block_size, offset = slot % a.block_size;
  const float* row = a.qkv + static_cast<int64_t>(t) * a.ld;
  Element* k_cache = static_cast<Element*>(a.k_cache);
  Element* v_cache = static_cast<Element*>(a.v_cache);
  const int32_t n = a.n_head_kv * a.head_dim;
  for (int32_t j = threadIdx.x; j < n; j += blockDim.x) {
    const int32_t h = j / a.head_dim, d = j % a.head_dim;
    const int64_t dst = ((block * a.n_head_kv + h) * a.block_size + offset) * a.head_dim + d;
    store_kv(k_cache, dst, row[a.k_column + j], a.k_scale);
    store_kv(v_cache, dst, row[a.v_column + j], a.v_scale);
  }
}

void launch_kv_write(const KvWriteArgs& args, cudaStream_t stream) {
  if (args.num_tokens == 0) return;
  if (args.element == KvElement::kFp8E4M3) {
    kv_write_kernel<__nv_fp8_storage_t><<<args.num_tokens, 256, 0, stream>>>(args);
  } else {
    kv_write_kernel<__half><<<args.num_tokens, 256, 0, stream>>>(args);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void kv_write(const KvWriteArgs& args, cudaStream_t stream) { launch_kv_write(args, stream); }

}  // namespace troupe::gpu::cuda
