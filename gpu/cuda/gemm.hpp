// Row-major projections through cuBLAS:
//   output[num_rows][output_dim] = input[num_rows][input_dim] . weight[output_dim][input_dim]^T
// (+ output, with add_to_output), with weight and input in F16 or BF16 and the output, the
// accumulation and the residual in F32. add_to_output fuses the residual add of the attention
// output and down projections into the GEMM (cuBLAS beta = 1).
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
  ActType activation_type = ActType::kF16;  // of weight and input
  const void* weight = nullptr;             // [output_dim][input_dim], row-major
  const void* input = nullptr;              // [num_rows][input_dim], input_stride elements apart
  int64_t input_stride = 0;
  float* output = nullptr;                  // [num_rows][output_dim], output_stride elements apart
  int64_t output_stride = 0;
  int32_t num_rows = 0;
  int32_t input_dim = 0;
  int32_t output_dim = 0;
  bool add_to_output = false;               // true: output += product; false: output = product
};

void gemm_rows(cublasHandle_t handle, const GemmArgs& args);

}  // namespace troupe::gpu::cuda
