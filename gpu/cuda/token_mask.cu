// Token bitmask application on the device (see token_mask.cuh).
#include "gpu/cuda/token_mask.cuh"

#include "gpu/cuda/cuda_check.cuh"

namespace troupe::gpu::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kTokensPerThread = 4;  // a block covers 1024 tokens: 48 blocks per row of a 49k vocab

// grid: (token tiles, rows). A thread's tokens are kThreads apart, so a warp reads one bitmask
// word (a broadcast) and 32 consecutive logits per load.
__global__ void __launch_bounds__(kThreads) apply_token_bitmask_kernel(TokenMaskArgs a) {
  const int32_t row = blockIdx.y;
  const int32_t mask_row = a.bitmask_rows[row];
  if (mask_row < 0) return;
  const uint32_t* bits = a.bitmask + static_cast<int64_t>(mask_row) * a.num_words;
  const int64_t base = static_cast<int64_t>(row) * a.n_vocab;
  const int32_t first = blockIdx.x * kThreads * kTokensPerThread + threadIdx.x;
#pragma unroll
  for (int i = 0; i < kTokensPerThread; ++i) {
    const int32_t t = first + i * kThreads;
    if (t >= a.n_vocab) break;
    const int32_t w = t / 32;
    const bool allowed = w < a.num_words && ((bits[w] >> (t % 32)) & 1u) != 0;
    a.out[base + t] = allowed ? a.in[base + t] : -INFINITY;
  }
}

}  // namespace

void apply_token_bitmask(const TokenMaskArgs& args, cudaStream_t stream) {
  if (args.num_rows == 0 || args.n_vocab == 0) return;
  const int32_t per_block = kThreads * kTokensPerThread;
  const dim3 grid((args.n_vocab + per_block - 1) / per_block, args.num_rows);
  apply_token_bitmask_kernel<<<grid, kThreads, 0, stream>>>(args);
  CUDA_CHECK_LAUNCH();
}

}  // namespace troupe::gpu::cuda
