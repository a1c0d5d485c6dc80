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
enum class WeightType : int32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

inline bool is_cuda_weight_type(uint32_t ggml_type_id) {
  switch (ggml_type_id) {
    case 0: case 1: case 2: case 3: case 6: case 7: case 8: case 12: case 13: case 14: case 30:
      return true;
    default: return false;
  }
}

inline int64_t act_bytes(ActType) { return 2; }  // F16 and BF16 alike

}  // namespace troupe::gpu::cuda
