// The reference dequantizer of every GGUF type troupe reads, by type: F32, F16, BF16 and the
// block formats of q4_q8.hpp, q5.hpp and kquant.hpp. The embedding look-up uses it, and the tests
// compare every kernel (CPU SIMD paths, CUDA) against it.
//
// Thread-safety: pure functions; callable from any thread.
#pragma once

#include <cstdint>

#include "model/tensor_type.hpp"

namespace troupe::model::quants {

// True for the types dequantize_row() decodes.
bool can_dequantize(TensorType type);

// Dequantizes one row of `num_elements` elements (a multiple of the type's block) to float.
// Throws std::invalid_argument for a type can_dequantize() rejects.
void dequantize_row(TensorType type, const void* row, int64_t num_elements, float* out);

}  // namespace troupe::model::quants
