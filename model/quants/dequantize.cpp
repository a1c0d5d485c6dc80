// Dequantization by type (see dequantize.hpp): a switch over the formats' own dequantizers.
#include "model/quants/dequantize.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

#include "model/fp16.hpp"
#include "model/quants/kquant.hpp"
#include "model/quants/q4_q8.hpp"
#include "model/quants/q5.hpp"

namespace troupe::model::quants {
namespace {

// The format's dequantizer, or null for types without one.
using RowDequantizer = void (*)(const void*, int64_t, float*);

void dequantize_row_f32(const void* row, int64_t n, float* out) { std::memcpy(out, row, 4 * n); }

void dequantize_row_f16(const void* row, int64_t n, float* out) {
  const auto* s = static_cast<const uint8_t*>(row);
  for (int64_t i = 0; i < n; ++i) out[i] = load_half(s + 2 * i);
}

void dequantize_row_bf16(const void* row, int64_t n, float* out) {
  const auto* s = static_cast<const uint8_t*>(row);
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_fp32(load_u16(s + 2 * i));
}

RowDequantizer dequantizer_of(TensorType type) {
  switch (type) {
    case TensorType::kF32: return dequantize_row_f32;
    case TensorType::kF16: return dequantize_row_f16;
    case TensorType::kBF16: return dequantize_row_bf16;
    case TensorType::kQ4_0: return dequantize_row_q4_0;
    case TensorType::kQ4_1: return dequantize_row_q4_1;
    case TensorType::kQ8_0: return dequantize_row_q8_0;
    case TensorType::kQ5_0: return dequantize_row_q5_0;
    case TensorType::kQ5_1: return dequantize_row_q5_1;
    case TensorType::kQ4_K: return dequantize_row_q4_k;
    case TensorType::kQ5_K: return dequantize_row_q5_k;
    case TensorType::kQ6_K: return dequantize_row_q6_k;
    case TensorType::kQ8_1:  // activation formats and types troupe reads no weights of
    case TensorType::kQ2_K:
    case TensorType::kQ3_K:
    case TensorType::kQ8_K:
    case TensorType::kI8:
    case TensorType::kI16:
    case TensorType::kI32:
    case TensorType::kI64:
    case TensorType::kF64: return nullptr;
  }
  return nullptr;
}

}  // namespace

bool can_dequantize(TensorType type) { return dequantizer_of(type) != nullptr; }

void dequantize_row(TensorType type, const void* row, int64_t num_elements, float* out) {
  const RowDequantizer dequantize = dequantizer_of(type);
  if (dequantize == nullptr) {
    throw std::invalid_argument("dequantize_row: type " + std::string(tensor_type_name(type)) +
                                " not supported");
  }
  dequantize(row, num_elements, out);
}

}  // namespace troupe::model::quants
