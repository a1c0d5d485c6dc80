// Plain C++ vocabulary shared by the CUDA ops' entry points and the host code that calls them:
// the element type of GEMM operands and activations, and the GGUF weight types the kernels can
// read. No CUDA types beyond cudaStream_t; includable from C++17 (nvcc) and C++20 (g++).
#pragma once

#include <cstdint>

#include "model/tensor_type.hpp"

namespace troupe::gpu::cuda {

// Element type of the dequantized weights and of the activations that feed the GEMMs. F16 for
// quantized, F16 and F32 models (finer mantissa than BF16 for the d*q products); BF16 for BF16
// models (no range loss). The residual stream and GEMM outputs stay F32.
enum class ActType : int32_t { kF16 = 0, kBF16 = 1 };

// GGUF element types: model::TensorType itself (a plain C++17 header), so the ids cannot drift.
// The kernels read the ones is_cuda_weight_type() accepts.
using WeightType = model::TensorType;

inline bool is_cuda_weight_type(uint32_t ggml_type_id) {
  switch (static_cast<WeightType>(ggml_type_id)) {
    case WeightType::kF32:
    case WeightType::kF16:
    case WeightType::kBF16:
    case WeightType::kQ4_0:
    case WeightType::kQ4_1:
    case WeightType::kQ5_0:
    case WeightType::kQ5_1:
    case WeightType::kQ8_0:
    case WeightType::kQ4_K:
    case WeightType::kQ5_K:
    case WeightType::kQ6_K: return true;
    case WeightType::kQ8_1:
    case WeightType::kQ2_K:
    case WeightType::kQ3_K:
    case WeightType::kQ8_K:
    case WeightType::kI8:
    case WeightType::kI16:
    case WeightType::kI32:
    case WeightType::kI64:
    case WeightType::kF64: return false;
  }
  return false;  // an id model::TensorType does not name
}

inline int64_t act_bytes(ActType) { return 2; }  // F16 and BF16 alike

// Element type of the paged KV cache, cache.kv_dtype's CUDA forms: fp16, or FP8 E4M3 (half the
// bytes; what vLLM's --kv-cache-dtype fp8 stores) holding value / scale with one scale per K or
// V tensor (gpu/fp8_e4m3.hpp has the conversions' CPU twins).
enum class KvElement : int32_t { kF16 = 0, kFp8E4M3 = 1 };

inline int64_t kv_element_bytes(KvElement e) { return e == KvElement::kF16 ? 2 : 1; }

}  // namespace troupe::gpu::cuda
