// CUDA_CHECK / CUBLAS_CHECK: every CUDA runtime and cuBLAS call goes through one of these. A
// failure throws CudaError naming the expression, the file and the line (ggml-cuda's habit), so a
// device error surfaces as a failed step with a readable message instead of garbage tokens.
// CUDA_CHECK_LAUNCH() after each kernel launch catches bad launch configurations at once.
//
// Plain C++ (host compilers and nvcc both include it); no Boost, spdlog or fmt (TOOLCHAIN.md).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace troupe::gpu::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* expr, const char* file,
                                          int line) {
  throw CudaError(std::string("CUDA error ") + cudaGetErrorName(status) + " (" +
                  cudaGetErrorString(status) + ") in `" + expr + "` at " + file + ":" +
                  std::to_string(line));
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* expr,
                                            const char* file, int line) {
  throw CudaError(std::string("cuBLAS error ") + cublasGetStatusName(status) + " (" +
                  cublasGetStatusString(status) + ") in `" + expr + "` at " + file + ":" +
                  std::to_string(line));
}

}  // namespace troupe::gpu::cuda

#define CUDA_CHECK(expr)                                                              \
  do {                                                                                \
    const cudaError_t troupe_cuda_status_ = (expr);                                   \
    if (troupe_cuda_status_ != cudaSuccess) {                                         \
      ::troupe::gpu::cuda::throw_cuda_error(troupe_cuda_status_, #expr, __FILE__, __LINE__); \
    }                                                                                 \
  } while (0)

#define CUBLAS_CHECK(expr)                                                              \
  do {                                                                                  \
    const cublasStatus_t troupe_cublas_status_ = (expr);                                \
    if (troupe_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                               \
      ::troupe::gpu::cuda::throw_cublas_error(troupe_cublas_status_, #expr, __FILE__, __LINE__); \
    }                                                                                   \
  } while (0)

// After a <<<...>>> launch: configuration errors are reported here; faults inside the kernel
// surface at the next synchronizing call (the step's completion event).
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
