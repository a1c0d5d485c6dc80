// Weight dequantization to F16/BF16 (see dequantize.cuh).
#include "gpu/cuda/dequantize.cuh"

#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/device_util.cuh"

namespace troupe::gpu::cuda {
namespace {

// One thread per output element, grid-stride: bandwidth-bound and run once, so simple.
__global__ void dequantize_matrix_kernel(const uint8_t* raw, WeightType type, int64_t row_bytes,
                                         int64_t num_rows, int64_t num_cols, void* out,
                                         ActType out_type) {
  const int64_t total = num_rows * num_cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / num_cols, c = i % num_cols;
    detail::store_act(out, i, detail::load_weight_element(raw + r * row_bytes, type, c), out_type);
  }
}

int64_t gguf_row_bytes(WeightType type, int64_t num_cols) {
  switch (type) {
    case WeightType::kF32: return 4 * num_cols;
    case WeightType::kF16:
    case WeightType::kBF16: return 2 * num_cols;
    case WeightType::kQ4_0: return num_cols / 32 * 18;
    case WeightType::kQ4_1: return num_cols / 32 * 20;
    case WeightType::kQ8_0: return num_cols / 32 * 34;
    case WeightType::kQ5_0: return num_cols / 32 * 22;
    case WeightType::kQ5_1: return num_cols / 32 * 24;
    case WeightType::kQ4_K: return num_cols / 256 * 144;
    case WeightType::kQ5_K: return num_cols / 256 * 176;
    case WeightType::kQ6_K: return num_cols / 256 * 210;
  }
  return 0;
}

void launch_dequantize_matrix(const void* raw, WeightType type, int64_t num_rows,
                              int64_t num_cols, void* out, ActType out_type, cudaStream_t stream) {
  const int64_t total = num_rows * num_cols;
  if (total == 0) return;
  const int threads = 256;
  const int64_t wanted = (total + threads - 1) / threads;
  const int blocks = static_cast<int>(wanted < 65536 ? wanted : 65536);
  dequantize_matrix_kernel<<<blocks, threads, 0, stream>>>(static_cast<const uint8_t*>(raw), type,
                                                           gguf_row_bytes(type, num_cols), num_rows,
                                                           num_cols, out, out_type);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void dequantize_matrix(const void* raw, WeightType type, int64_t num_rows, int64_t num_cols,
                       void* out, ActType out_type, cudaStream_t stream) {
  launch_dequantize_matrix(raw, type, num_rows, num_cols, out, out_type, stream);
}

}  // namespace troupe::gpu::cuda
