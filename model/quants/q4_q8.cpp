// Q4_0 / Q4_1 / Q8_0 reference dequantizers (see q4_q8.hpp; ggml-quants.c's dequantize_row_*).
#include "model/quants/q4_q8.hpp"

#include "model/fp16.hpp"

namespace troupe::model::quants {

void dequantize_row_q4_0(const void* row, int64_t n, float* out) {
  for (int64_t b = 0; b < n / kBlockElements; ++b) {
    const auto blk = load_block<BlockQ4_0>(row, b);
    const float d = fp16_to_fp32(blk.d);
    for (int i = 0; i < kBlockElements; ++i)
      out[kBlockElements * b + i] = d * static_cast<float>(q4_code(blk.qs, i) - 8);
  }
}

void dequantize_row_q4_1(const void* row, int64_t n, float* out) {
  for (int64_t b = 0; b < n / kBlockElements; ++b) {
    const auto blk = load_block<BlockQ4_1>(row, b);
    const float d = fp16_to_fp32(blk.d), m = fp16_to_fp32(blk.m);
    for (int i = 0; i < kBlockElements; ++i)
      out[kBlockElements * b + i] = d * static_cast<float>(q4_code(blk.qs, i)) + m;
  }
}

void dequantize_row_q8_0(const void* row, int64_t n, float* out) {
  for (int64_t b = 0; b < n / kBlockElements; ++b) {
    const auto blk = load_block<BlockQ8_0>(row, b);
    const float d = fp16_to_fp32(blk.d);
    for (int i = 0; i < kBlockElements; ++i)
      out[kBlockElements * b + i] = d * static_cast<float>(blk.qs[i]);
  }
}

}  // namespace troupe::model::quants
