// cuBLAS projections (see gemm.hpp).
#include "gpu/cuda/gemm.hpp"

#include "gpu/cuda/cuda_check.cuh"

namespace troupe::gpu::cuda {

void gemm_rows(cublasHandle_t handle, const GemmArgs& a) {
  if (a.num_rows == 0 || a.output_dim == 0) return;
  // cuBLAS is column-major: the row-major output[num_rows][output_dim] is a column-major
  // output_dim x num_rows matrix, weight[output_dim][input_dim] row-major is a column-major
  // input_dim x output_dim matrix (transposed in the product), and input[num_rows][input_dim]
  // row-major is a column-major input_dim x num_rows matrix. So output^T = weight . input^T.
  const cudaDataType_t t = a.activation_type == ActType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
  const float alpha = 1.0f;
  const float beta = a.add_to_output ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, a.output_dim, a.num_rows, a.input_dim,
                            &alpha, a.weight, t, a.input_dim, a.input, t,
                            static_cast<int>(a.input_stride), &beta, a.output, CUDA_R_32F,
                            static_cast<int>(a.output_stride), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

}  // namespace troupe::gpu::cuda
