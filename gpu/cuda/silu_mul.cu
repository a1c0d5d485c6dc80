// SwiGLU (see silu_mul.cuh).
#include "gpu/cuda/silu_mul.cuh"

#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/device_util.cuh"

namespace troupe::gpu::cuda {
namespace {

__global__ void silu_mul_kernel(const float* gate_up, int64_t total, int32_t n_ff, void* out,
                                ActType out_type, bool out_f32) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / n_ff, j = i % n_ff;
    const float g = gate_up[t * 2 * n_ff + j];
    const float u = gate_up[t * 2 * n_ff + n_ff + j];
    const float y = g / (1.0f + expf(-g)) * u;
    if (out_f32) {
      static_cast<float*>(out)[i] = y;
    } else {
      detail::store_act(out, i, y, out_type);
    }
  }
}

void launch_silu_mul(const float* gate_up, int32_t num_tokens, int32_t n_ff, void* out,
                     ActType out_type, bool out_f32, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(num_tokens) * n_ff;
  if (total == 0) return;
  const int threads = 256;
  const int blocks = detail::grid_stride_blocks(total, threads);
  silu_mul_kernel<<<blocks, threads, 0, stream>>>(gate_up, total, n_ff, out, out_type, out_f32);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void silu_mul(const float* gate_up, int32_t num_tokens, int32_t n_ff, void* out, ActType out_type,
              bool out_f32, cudaStream_t stream) {
  launch_silu_mul(gate_up, num_tokens, n_ff, out, out_type, out_f32, stream);
}

}  // namespace troupe::gpu::cuda
