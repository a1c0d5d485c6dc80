// Q5_0 / Q5_1 block codecs (see q5.hpp; checked against ggml's ggml-quants.c).
#include "model/quants/q5.hpp"

#include <algorithm>
#include <cmath>

#include "model/fp16.hpp"

namespace troupe::model::quants {
namespace {

// Writes 32 codes (0..31) as low nibbles in qs and fifth bits in qh (little-endian uint32).
void store_codes(const int (&codes)[kBlockElements], uint8_t* qh, uint8_t* qs) {
  uint32_t bits = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((codes[j] & 0x0F) | ((codes[j + 16] & 0x0F) << 4));
    bits |= static_cast<uint32_t>((codes[j] >> 4) & 1) << j;
    bits |= static_cast<uint32_t>((codes[j + 16] >> 4) & 1) << (j + 16);
  }
  for (int b = 0; b < 4; ++b) qh[b] = static_cast<uint8_t>(bits >> (8 * b));
}

}  // namespace

void dequantize_row_q5_0(const void* row, int64_t n, float* out) {
  for (int64_t b = 0; b < n / kBlockElements; ++b) {
    const auto blk = load_block<BlockQ5_0>(row, b);
    const float d = fp16_to_fp32(blk.d);
    for (int i = 0; i < kBlockElements; ++i)
      out[kBlockElements * b + i] = static_cast<float>(q5_code(blk, i) - 16) * d;
  }
}

void dequantize_row_q5_1(const void* row, int64_t n, float* out) {
  for (int64_t b = 0; b < n / kBlockElements; ++b) {
    const auto blk = load_block<BlockQ5_1>(row, b);
    const float d = fp16_to_fp32(blk.d), m = fp16_to_fp32(blk.m);
    for (int i = 0; i < kBlockElements; ++i)
      out[kBlockElements * b + i] = static_cast<float>(q5_code(blk, i)) * d + m;
  }
}

void quantize_row_q5_0(const float* x, int64_t n, void* out) {
  for (int64_t b = 0; b < n / kBlockElements; ++b) {
    const float* xb = x + b * kBlockElements;
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < kBlockElements; ++i) {
      if (amax < std::fabs(xb[i])) {
        amax = std::fabs(xb[i]);
        max = xb[i];
      }
    }
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_0 blk{};
    blk.d = fp32_to_fp16(d);
    int codes[kBlockElements];
    // ggml truncates x * id + 16.5 toward zero (x * id >= -16 keeps it non-negative).
    for (int i = 0; i < kBlockElements; ++i)
      codes[i] = std::min(31, static_cast<int>(static_cast<int8_t>(xb[i] * id + 16.5f)));
    store_codes(codes, blk.qh, blk.qs);
    store_block(out, b, blk);
  }
}

void quantize_row_q5_1(const float* x, int64_t n, void* out) {
  for (int64_t b = 0; b < n / kBlockElements; ++b) {
    const float* xb = x + b * kBlockElements;
    const auto [lo, hi] = std::minmax_element(xb, xb + kBlockElements);
    const float min = *lo;
    const float d = (*hi - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_1 blk{};
    blk.d = fp32_to_fp16(d);
    blk.m = fp32_to_fp16(min);
    int codes[kBlockElements];
    for (int i = 0; i < kBlockElements; ++i)
      codes[i] = std::min(31, static_cast<int>((xb[i] - min) * id + 0.5f));
    store_codes(codes, blk.qh, blk.qs);
    store_block(out, b, blk);
  }
}

}  // namespace troupe::model::quants
