// ggml's 32-value block formats Q4_0, Q4_1, Q8_0 (and Q8_1, the activation format llama.cpp
// pairs with Q4_1): the block structs, their geometry, the 4-bit code extraction and a scalar
// (reference) dequantizer per format, the one every CPU kernel and the CUDA dequantizer are
// tested against.
//
// Layouts (GGUF_NOTES.md §2, ggml-common.h; fp16 = IEEE binary16, no padding, little-endian):
//   block_q4_0 (18 B): d fp16 @0 |           qs[16] @2    value i: d * (q_i - 8)
//   block_q4_1 (20 B): d fp16 @0 | m fp16 @2 | qs[16] @4  value i: d * q_i + m
//   block_q8_0 (34 B): d fp16 @0 | qs[32] int8 @2         value i: d * qs[i]
//   block_q8_1 (36 B): d fp16 @0 | s fp16 @2 | qs[32] int8 @4  (s = d * sum(qs); dots only)
// 4-bit codes: byte qs[j] holds value j in its low nibble and value j + 16 in its high nibble.
//
// The structs hold fp16 fields as raw uint16_t (decode with model/fp16.hpp) so that this header
// stays plain C++17 for nvcc. Read blocks with load_block() (block.hpp).
//
// Thread-safety: constants and pure functions; callable from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/quants/block.hpp"

namespace troupe::model::quants {

// Elements per block of every 32-value format (ggml's QK4_0 = QK4_1 = QK5_0 = QK5_1 = QK8_0).
inline constexpr int kBlockElements = 32;

struct BlockQ4_0 {
  static constexpr int kElements = kBlockElements;
  uint16_t d;
  uint8_t qs[kBlockElements / 2];
};
struct BlockQ4_1 {
  static constexpr int kElements = kBlockElements;
  uint16_t d;
  uint16_t m;
  uint8_t qs[kBlockElements / 2];
};
struct BlockQ8_0 {
  static constexpr int kElements = kBlockElements;
  uint16_t d;
  int8_t qs[kBlockElements];
};
struct BlockQ8_1 {
  static constexpr int kElements = kBlockElements;
  uint16_t d;
  uint16_t s;
  int8_t qs[kBlockElements];
};

// GGUF's byte sizes (GGUF_NOTES.md §2): a struct that grew padding would misread every tensor.
static_assert(sizeof(BlockQ4_0) == 18 && offsetof(BlockQ4_0, qs) == 2, "block_q4_0 layout");
static_assert(sizeof(BlockQ4_1) == 20 && offsetof(BlockQ4_1, qs) == 4, "block_q4_1 layout");
static_assert(sizeof(BlockQ8_0) == 34 && offsetof(BlockQ8_0, qs) == 2, "block_q8_0 layout");
static_assert(sizeof(BlockQ8_1) == 36 && offsetof(BlockQ8_1, qs) == 4, "block_q8_1 layout");

// The unsigned 4-bit code (0..15) of value i (0..31) of the 16 packed bytes `qs` (Q4_0, Q4_1 and
// the low bits of Q5_0 / Q5_1).
inline int q4_code(const uint8_t* qs, int i) {
  return i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
}

// Dequantizes `num_elements` values (a multiple of 32) of a row, as ggml's dequantize_row_*:
// Q4_0: float(q - 8) * d; Q4_1: float(q) * d + m; Q8_0: float(q) * d.
void dequantize_row_q4_0(const void* row, int64_t num_elements, float* out);
void dequantize_row_q4_1(const void* row, int64_t num_elements, float* out);
void dequantize_row_q8_0(const void* row, int64_t num_elements, float* out);

}  // namespace troupe::model::quants
