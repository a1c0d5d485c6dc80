// ggml's 5-bit block formats Q5_0 and Q5_1: the block structs, code extraction, a scalar
// (reference) dequantizer per format (the one every CPU kernel and the CUDA dequantizer are
// tested against) and ggml's reference quantizers (for dummy weights and tests).
//
// Layouts (GGUF_NOTES.md §2, ggml-common.h; 32 values per block, fp16 = IEEE binary16, no
// padding):
//   block_q5_0 (22 B): d fp16 @0 |             qh[4] @2 | qs[16] @6
//   block_q5_1 (24 B): d fp16 @0 | m fp16 @2 | qh[4] @4 | qs[16] @8
// Value i (0..31) has the 4-bit low code of q4_code(qs, i) (q4_q8.hpp: low nibble for i < 16,
// high nibble for i >= 16) and its fifth bit in bit i of qh read as a little-endian uint32.
// Q5_0: d * (code - 16); Q5_1: d * code + m.
//
// Plain C++17 (nvcc reads the geometry too); fp16 fields are raw bits (model/fp16.hpp decodes).
//
// Thread-safety: constants and pure functions; callable from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/quants/q4_q8.hpp"

namespace troupe::model::quants {

struct BlockQ5_0 {
  static constexpr int kElements = kBlockElements;
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kBlockElements / 2];
};
struct BlockQ5_1 {
  static constexpr int kElements = kBlockElements;
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kBlockElements / 2];
};

static_assert(sizeof(BlockQ5_0) == 22 && offsetof(BlockQ5_0, qh) == 2 &&
                  offsetof(BlockQ5_0, qs) == 6,
              "block_q5_0 layout (GGUF_NOTES.md §2)");
static_assert(sizeof(BlockQ5_1) == 24 && offsetof(BlockQ5_1, qh) == 4 &&
                  offsetof(BlockQ5_1, qs) == 8,
              "block_q5_1 layout (GGUF_NOTES.md §2)");

// The unsigned 5-bit code (0..31) of value i of a block whose qh is `qh` and qs `qs`.
inline int q5_code(const uint8_t* qh, const uint8_t* qs, int i) {
  const uint32_t bits = static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8 |
                        static_cast<uint32_t>(qh[2]) << 16 | static_cast<uint32_t>(qh[3]) << 24;
  return q4_code(qs, i) | static_cast<int>(((bits >> i) & 1u) << 4);
}
template <class Block>
inline int q5_code(const Block& blk, int i) {
  return q5_code(blk.qh, blk.qs, i);
}

// Dequantizes `num_elements` values (a multiple of 32) of a row, as ggml's dequantize_row_*:
// Q5_0: float(code - 16) * d; Q5_1: float(code) * d + m.
void dequantize_row_q5_0(const void* row, int64_t num_elements, float* out);
void dequantize_row_q5_1(const void* row, int64_t num_elements, float* out);

// ggml's quantize_row_q5_0_ref / _q5_1_ref: Q5_0 scales by the signed value of largest
// magnitude (d = max / -16), Q5_1 spans [min, max] in 31 steps with m = min.
void quantize_row_q5_0(const float* x, int64_t num_elements, void* out);
void quantize_row_q5_1(const float* x, int64_t num_elements, void* out);

}  // namespace troupe::model::quants
