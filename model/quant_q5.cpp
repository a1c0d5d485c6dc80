// Q5_0 / Q5_1 block codecs (see quant_q5.hpp; checked against ggml's ggml-quants.c).
#include "model/quant_q5.hpp"
#include "model/fp16.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace troupe::model::q5 {
namespace {

using model::load_half;
using model::store_half;

// Writes 32 codes (0..31) as low nibbles in qs and fifth bits in qh (little-endian uint32).
void store_codes(const int (&codes)[kBlock], uint8_t* qh, uint8_t* qs) {
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
  const auto* s = static_cast<const uint8_t*>(row);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const uint8_t* blk = s + b * kQ5_0Bytes;
    const float d = load_half(blk);
    for (int i = 0; i < kBlock; ++i)
      out[kBlock * b + i] = static_cast<float>(q5_0_code(blk, i) - 16) * d;
  }
}

void dequantize_row_q5_1(const void* row, int64_t n, float* out) {
  const auto* s = static_cast<const uint8_t*>(row);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const uint8_t* blk = s + b * kQ5_1Bytes;
    const float d = load_half(blk), m = load_half(blk + kQ5_1M);
    for (int i = 0; i < kBlock; ++i)
      out[kBlock * b + i] = static_cast<float>(q5_1_code(blk, i)) * d + m;
  }
}

void quantize_row_q5_0(const float* x, int64_t n, void* out_row) {
  auto* out = static_cast<uint8_t*>(out_row);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    uint8_t* blk = out + b * kQ5_0Bytes;
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < kBlock; ++i) {
      if (amax < std::fabs(xb[i])) {
        amax = std::fabs(xb[i]);
        max = xb[i];
      }
    }
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_half(blk, d);
    int codes[kBlock];
    // ggml truncates x * id + 16.5 toward zero (x * id >= -16 keeps it non-negative).
    for (int i = 0; i < kBlock; ++i)
      codes[i] = std::min(31, static_cast<int>(static_cast<int8_t>(xb[i] * id + 16.5f)));
    store_codes(codes, blk + kQ5_0Qh, blk + kQ5_0Qs);
  }
}

void quantize_row_q5_1(const float* x, int64_t n, void* out_row) {
  auto* out = static_cast<uint8_t*>(out_row);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    uint8_t* blk = out + b * kQ5_1Bytes;
    const auto [lo, hi] = std::minmax_element(xb, xb + kBlock);
    const float min = *lo;
    const float d = (*hi - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_half(blk, d);
    store_half(blk + kQ5_1M, min);
    int codes[kBlock];
    for (int i = 0; i < kBlock; ++i)
      codes[i] = std::min(31, static_cast<int>((xb[i] - min) * id + 0.5f));
    store_codes(codes, blk + kQ5_1Qh, blk + kQ5_1Qs);
  }
}

}  // namespace troupe::model::q5
