// Plain C++ vocabulary shared by the CUDA ops' entry points and the host code that calls them:
// the element type of GEMM operands and activations, and the GGUF weight types the kernels can
// read. No CUDA types beyond cudaStream_t; includable from C++17 (nvcc) and C++20 (g++).
#pragma once

#include <cstdint>

namespace troupe::gpu::cuda {

// Element type of the dequantized weights and of the activations that feed the GEMMs. F16 for
// quantized, F16 and F32 models (finer mantissa than BF16 for the d*q products); BF16 for BF16
// models (no range loss). The residual stream and GEMM outputs stay F32.
enum class ActType : int32_t { kF16 = 0, kBF16 = 1 };

// GGUF element types the kernels read (values are the ggml type ids, model::TensorType).
enum class WeightType : int32_t { kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 8, kBF16 = 30 };

inline bool is_cuda_weight_type(uint32_t ggml_type_id) {
  return ggml_type_id == 0 || ggml_type_id == 1 || ggml_type_id == 2 || ggml_type_id == 3 ||
         ggml_type_id == 8 || ggml_type_id == 30;
}

inline int64_t act_bytes(ActType) { return 2; }  // F16 and BF16 alike

}  // namespace troupe::gpu::cuda
