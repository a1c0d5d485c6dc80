// RMSNorm (see rmsnorm.cuh).
#include "gpu/cuda/rmsnorm.cuh"

#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/device_util.cuh"

namespace troupe::gpu::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row. The double accumulation costs nothing next to the GEMMs and keeps the
// scale equal to the CPU's to the last bit in most rows.
__global__ void rmsnorm_kernel(RmsNormArgs a) {
  __shared__ double scratch[32];
  const int32_t r = blockIdx.x;
  const int64_t in_row = a.row_index != nullptr ? a.row_index[r] : r;
  const float* x = a.x + in_row * a.ld_x;
  double sum = 0.0;
  for (int32_t j = threadIdx.x; j < a.n; j += blockDim.x) sum += static_cast<double>(x[j] * x[j]);
  sum = detail::block_sum(sum, scratch);
  const float scale = detail::rms_scale(sum, a.n, a.eps);
  const int64_t base = static_cast<int64_t>(r) * a.ld_out;
  for (int32_t j = threadIdx.x; j < a.n; j += blockDim.x) {
    const float y = (x[j] * scale) * a.weight[j];
    if (a.out_f32 != nullptr && a.add_to_out) {
      a.out_f32[base + j] += y;
    } else if (a.out_f32 != nullptr) {
      a.out_f32[base + j] = y;
    } else {
      detail::store_act(a.out_act, base + j, y, a.act_type);
    }
  }
}

void launch_rmsnorm(const RmsNormArgs& args, cudaStream_t stream) {
  if (args.num_rows == 0) return;
  rmsnorm_kernel<<<args.num_rows, kThreads, 0, stream>>>(args);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rmsnorm_rows(const RmsNormArgs& args, cudaStream_t stream) { launch_rmsnorm(args, stream); }

}  // namespace troupe::gpu::cuda
