// Row-major projections through cuBLAS: y[rows][n_out] = x[rows][k] . W[n_out][k]^T (+ beta y),
// with W and x in F16 or BF16 and y, the accumulation and the residual in F32. beta = 1 fuses the
// residual add of the output and down projections into the GEMM.
//
// cublasGemmEx with the default algorithm today; cublasLt (epilogues, algorithm choice per shape)
// is the alternative to measure on the device — this function is the one place to swap it.
//
// Thread-safety: one handle per backend, bound to its stream; calls enqueue on that stream.
#pragma once

#include <cublas_v2.h>

#include <cstdint>

#include "gpu/cuda/kernel_types.cuh"

namespace troupe::gpu::cuda {

struct GemmArgs {
  ActType type = ActType::kF16;  // of w and x
  const void* w = nullptr;       // [n_out][k], row-major
  const void* x = nullptr;       // [rows][k], ld_x apart
  int64_t ld_x = 0;
  float* y = nullptr;            // [rows][n_out], ld_y apart
  int64_t ld_y = 0;
  int32_t rows = 0;
  int32_t n_out = 0;
  int32_t k = 0;
  float beta = 0.0f;             // 1: accumulate into y
};

void gemm_rows(cublasHandle_t handle, const GemmArgs& args);

}  // namespace troupe::gpu::cuda
