// RoPE (see rope.cuh).
#include "gpu/cuda/rope.cuh"

#include <cmath>
#include <stdexcept>

#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/device_util.cuh"

namespace troupe::gpu::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxHalfRot = 256;

// One block per token: the cos/sin table of its position in shared memory, then every pair of
// every Q and K head.
__global__ void rope_kernel(RopeArgs a, float theta_scale) {
  __shared__ float cos_t[kMaxHalfRot];
  __shared__ float sin_t[kMaxHalfRot];
  const int32_t t = blockIdx.x;
  const int32_t half = a.n_rot / 2;
  const float pos = static_cast<float>(a.positions[t]);
  for (int32_t i = threadIdx.x; i < half; i += blockDim.x) {
    float theta_base = pos;
    for (int32_t k = 0; k < i; ++k) theta_base *= theta_scale;  // the CPU's float sequence
    // Divide before scaling, as the CPU's rope_table and ggml do; no factors: the plain path.
    const float theta =
        a.freq_scale * (a.freq_factors != nullptr ? theta_base / a.freq_factors[i] : theta_base);
    cos_t[i] = cosf(theta);
    sin_t[i] = sinf(theta);
  }
  __syncthreads();
  float* row = a.qkv + static_cast<int64_t>(t) * a.ld;
  const int32_t num_heads = a.n_head + a.n_head_kv;  // K heads follow Q heads in the row
  for (int32_t item = threadIdx.x; item < num_heads * half; item += blockDim.x) {
    const int32_t h = item / half, i = item % half;
    float* v = row + static_cast<int64_t>(h) * a.head_dim;
    const int32_t i0 = a.neox ? i : 2 * i;
    const int32_t i1 = a.neox ? i + half : 2 * i + 1;
    const float x0 = v[i0], x1 = v[i1];
    v[i0] = fmaf(x0, cos_t[i], -(x1 * sin_t[i]));
    v[i1] = fmaf(x0, sin_t[i], x1 * cos_t[i]);
  }
  if (!a.round_q_to_f16 && a.q_scale == 1.0f) return;
  __syncthreads();
  const int32_t q_dim = a.n_head * a.head_dim;
  for (int32_t j = threadIdx.x; j < q_dim; j += blockDim.x) {
    const float q = row[j] * a.q_scale;  // x * 1.0f is x: the llama family is unchanged
    row[j] = a.round_q_to_f16 ? __half2float(__float2half_rn(q)) : q;
  }
}

void launch_rope(const RopeArgs& args, cudaStream_t stream) {
  if (args.num_tokens == 0) return;
  if (args.n_rot <= 0 || args.n_rot % 2 != 0 || args.n_rot / 2 > kMaxHalfRot || args.n_rot > args.head_dim) {
    throw std::invalid_argument("rope_inplace: n_rot must be even, positive, <= head_dim and <= 512");
  }
  // Same expression as the CPU's rope_table, evaluated on the host in float.
  const float theta_scale = std::pow(args.freq_base, -2.0f / static_cast<float>(args.n_rot));
  rope_kernel<<<args.num_tokens, kThreads, 0, stream>>>(args, theta_scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_inplace(const RopeArgs& args, cudaStream_t stream) { launch_rope(args, stream); }

}  // namespace troupe::gpu::cuda
