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

void launch_dequantize_matrix(const void* raw, WeightType type, int64_t num_rows,
                              int64_t num_cols, void* out, ActType out_type, cudaStream_t stream) {
  const int64_t total = num_rows * num_cols;
  if (total == 0) return;
  const int threads = 256;
  const int blocks = detail::grid_stride_blocks(total, threads);
  // GGUF's row size, from the block structs of model/quants/ (through the type table).
  const auto row_bytes = static_cast<int64_t>(model::row_bytes(type, static_cast<uint64_t>(num_cols)));
  dequantize_matrix_kernel<<<blocks, threads, 0, stream>>>(static_cast<const uint8_t*>(raw), type,
                                                           row_bytes, num_rows, num_cols, out,
                                                           out_type);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void dequantize_matrix(const void* raw, WeightType type, int64_t num_rows, int64_t num_cols,
                       void* out, ActType out_type, cudaStream_t stream) {
  launch_dequantize_matrix(raw, type, num_rows, num_cols, out, out_type, stream);
}

}  // namespace troupe::gpu::cuda
