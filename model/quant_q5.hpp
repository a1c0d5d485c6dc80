// ggml's 5-bit block formats Q5_0 and Q5_1: byte layouts, code extraction, a scalar dequantizer
// per type (the reference every CPU kernel and the CUDA dequantizer are tested against) and
// ggml's reference quantizers (for dummy weights and tests).
//
// Layouts (ggml-common.h; 32 values per block, fp16 = IEEE binary16, no padding):
//   block_q5_0 (22 B): d fp16 @0 |             qh u32 @2 | qs[16] @6
//   block_q5_1 (24 B): d fp16 @0 | m fp16 @2 | qh u32 @4 | qs[16] @8
// Value i (0..31) has the 4-bit low code qs[i % 16] (low nibble for i < 16, high nibble for
// i >= 16, as Q4_0/Q4_1) and its fifth bit in bit i of qh read as a little-endian uint32.
// Q5_0: d * (code - 16); Q5_1: d * code + m.
//
// Thread-safety: pure functions; callable from any thread.
#pragma once

#include <cstdint>

namespace troupe::model::q5 {

inline constexpr int kBlock = 32;
inline constexpr int kQ5_0Bytes = 22;
inline constexpr int kQ5_1Bytes = 24;

// Byte offsets inside a block.
inline constexpr int kQ5_0Qh = 2, kQ5_0Qs = 6;
inline constexpr int kQ5_1M = 2, kQ5_1Qh = 4, kQ5_1Qs = 8;

// The unsigned 5-bit code (0..31) of value i of a block whose qh starts at `qh` and qs at `qs`.
inline int q5_code(const uint8_t* qh, const uint8_t* qs, int i) {
  const uint32_t bits = static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8 |
                        static_cast<uint32_t>(qh[2]) << 16 | static_cast<uint32_t>(qh[3]) << 24;
  const int low = i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
  return low | static_cast<int>(((bits >> i) & 1u) << 4);
}

inline int q5_0_code(const uint8_t* block, int i) {
  return q5_code(block + kQ5_0Qh, block + kQ5_0Qs, i);
}
inline int q5_1_code(const uint8_t* block, int i) {
  return q5_code(block + kQ5_1Qh, block + kQ5_1Qs, i);
}

// Dequantizes `num_elements` values (a multiple of 32) of a row, as ggml's dequantize_row_*:
// Q5_0: float(code - 16) * d; Q5_1: float(code) * d + m.
void dequantize_row_q5_0(const void* row, int64_t num_elements, float* out);
void dequantize_row_q5_1(const void* row, int64_t num_elements, float* out);

// ggml's quantize_row_q5_0_ref / _q5_1_ref: Q5_0 scales by the signed value of largest
// magnitude (d = max / -16), Q5_1 spans [min, max] in 31 steps with m = min.
void quantize_row_q5_0(const float* x, int64_t num_elements, void* out);
void quantize_row_q5_1(const float* x, int64_t num_elements, void* out);

}  // namespace troupe::model::q5
