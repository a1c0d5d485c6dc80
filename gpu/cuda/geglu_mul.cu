// GEGLU (see geglu_mul.cuh).
#include "gpu/cuda/geglu_mul.cuh"

#include <cuda_fp16.h>

#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/device_util.cuh"

namespace troupe::gpu::cuda {
namespace {

__global__ void geglu_mul_kernel(const float* gate_up, int64_t total, int32_t n_ff,
                                 const uint16_t* gelu_table, void* out, ActType out_type,
                                 bool out_f32) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / n_ff, j = i % n_ff;
    const float z = gate_up[t * 2 * n_ff + j];
    const float u = gate_up[t * 2 * n_ff + n_ff + j];
    float y;
    if (z <= -10.0f) {
      y = 0.0f;
    } else if (z >= 10.0f) {
      y = z * u;
    } else {
      // The table's index is z's fp16 bits, rounded to nearest even as the CPU twin rounds.
      const uint16_t h = __half_as_ushort(__float2half_rn(z));
      y = __half2float(__ushort_as_half(gelu_table[h])) * u;
    }
    if (out_f32) {
      static_cast<float*>(out)[i] = y;
    } else {
      detail::store_act(out, i, y, out_type);
    }
  }
}

}  // namespace

void geglu_mul(const float* gate_up, int32_t num_tokens, int32_t n_ff, const uint16_t* gelu_table,
               void* out, ActType out_type, bool out_f32, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(num_tokens) * n_ff;
  if (total == 0) return;
  const int threads = 256;
  const int blocks = detail::grid_stride_blocks(total, threads);
  geglu_mul_kernel<<<blocks, threads, 0, stream>>>(gate_up, total, n_ff, gelu_table, out, out_type,
                                                   out_f32);
  CUDA_CHECK_LAUNCH();
}

}  // namespace troupe::gpu::cuda
