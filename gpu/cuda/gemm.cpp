// cuBLAS projections (see gemm.hpp).
#include "gpu/cuda/gemm.hpp"

#include "gpu/cuda/cuda_check.cuh"

namespace troupe::gpu::cuda {

void gemm_rows(cublasHandle_t handle, const GemmArgs& a) {
  if (a.rows == 0 || a.n_out == 0) return;
  // cuBLAS is column-major: the row-major y[rows][n_out] is a column-major n_out x rows matrix,
  // W[n_out][k] row-major is a column-major k x n_out matrix (transposed in the product), and
  // x[rows][k] row-major is a column-major k x rows matrix. So y^T = W . x^T.
  const cudaDataType_t t = a.type == ActType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, a.n_out, a.rows, a.k, &alpha, a.w, t,
                            a.k, a.x, t, static_cast<int>(a.ld_x), &a.beta, a.y, CUDA_R_32F,
                            static_cast<int>(a.ld_y), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace troupe::gpu::cuda
