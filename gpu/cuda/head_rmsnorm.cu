// Per-head RMSNorm of Q and K (see head_rmsnorm.cuh).
#include "gpu/cuda/head_rmsnorm.cuh"

#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/device_util.cuh"

namespace troupe::gpu::cuda {
namespace {

// A head is at most 256 values: one warp per head keeps the reduction to shuffles.
constexpr int kThreads = 32;

// Block (t, h): head h of token t, Q heads first, then K heads (their order in the row).
__global__ void head_rmsnorm_kernel(HeadRmsNormArgs a) {
  const int32_t t = blockIdx.x, h = blockIdx.y;
  float* x = a.qkv + static_cast<int64_t>(t) * a.ld + static_cast<int64_t>(h) * a.head_dim;
  const float* weight = h < a.n_head ? a.q_weight : a.k_weight;
  double sum = 0.0;
  for (int32_t j = threadIdx.x; j < a.head_dim; j += blockDim.x) {
    sum += static_cast<double>(x[j] * x[j]);
  }
  sum = detail::warp_sum(sum);
  const float scale = detail::rms_scale(sum, a.head_dim, a.eps);
  // Each lane writes only the values it read: in place is safe.
  for (int32_t j = threadIdx.x; j < a.head_dim; j += blockDim.x) x[j] = (x[j] * scale) * weight[j];
}

void launch_head_rmsnorm(const HeadRmsNormArgs& args, cudaStream_t stream) {
  if (args.num_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(args.num_tokens),
                  static_cast<unsigned>(args.n_head + args.n_head_kv));
  head_rmsnorm_kernel<<<grid, kThreads, 0, stream>>>(args);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void head_rmsnorm_inplace(const HeadRmsNormArgs& args, cudaStream_t stream) {
  launch_head_rmsnorm(args, stream);
}

}  // namespace troupe::gpu::cuda
