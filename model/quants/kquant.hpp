// ggml's K-quant super-blocks: Q4_K, Q5_K, Q6_K (the ones troupe reads) with their structs,
// the 6-bit scale unpacking, a scalar (reference) dequantizer per format (the one every kernel is
// tested against) and a simple quantizer (for dummy weights and tests; not llama.cpp's
// error-minimizing search); Q2_K, Q3_K and Q8_K as layouts only, for their sizes.
//
// Layouts (GGUF_NOTES.md §2, ggml-common.h; 256 values per super-block, fp16 = IEEE binary16,
// no padding):
//   block_q4_K (144 B): d fp16 @0 | dmin fp16 @2 | scales[12] @4 | qs[128] @16
//   block_q5_K (176 B): d fp16 @0 | dmin fp16 @2 | scales[12] @4 | qh[32] @16 | qs[128] @48
//   block_q6_K (210 B): ql[128] @0 | qh[64] @128 | scales[16] int8 @192 | d fp16 @208
// Q4_K/Q5_K value i of sub-block j (32 values each): d * sc_j * q - dmin * m_j.
// Q6_K value i (16-value sub-block i / 16): (d * scales[i / 16]) * (q - 32).
//
// Plain C++17 (nvcc reads the geometry too); fp16 fields are raw bits (model/fp16.hpp decodes).
//
// Thread-safety: constants and pure functions; callable from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/quants/block.hpp"

namespace troupe::model::quants {

// Elements per super-block (ggml's QK_K).
inline constexpr int kSuperBlockElements = 256;
// Elements per Q4_K/Q5_K sub-block (one 6-bit scale and min each).
inline constexpr int kKSubBlockElements = 32;
// Sub-blocks per Q4_K/Q5_K super-block.
inline constexpr int kKSubBlocks = kSuperBlockElements / kKSubBlockElements;
// Bytes of the packed 6-bit scales and mins of Q4_K/Q5_K (ggml's K_SCALE_SIZE).
inline constexpr int kKScaleBytes = 12;

struct BlockQ4_K {
  static constexpr int kElements = kSuperBlockElements;
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kSuperBlockElements / 2];
};
struct BlockQ5_K {
  static constexpr int kElements = kSuperBlockElements;
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kSuperBlockElements / 8];
  uint8_t qs[kSuperBlockElements / 2];
};
struct BlockQ6_K {
  static constexpr int kElements = kSuperBlockElements;
  uint8_t ql[kSuperBlockElements / 2];
  uint8_t qh[kSuperBlockElements / 4];
  int8_t scales[kSuperBlockElements / 16];
  uint16_t d;
};
// Layouts only: troupe multiplies no tensor of these types, but knows their sizes.
struct BlockQ2_K {
  static constexpr int kElements = kSuperBlockElements;
  uint8_t scales[kSuperBlockElements / 16];
  uint8_t qs[kSuperBlockElements / 4];
  uint16_t d;
  uint16_t dmin;
};
struct BlockQ3_K {
  static constexpr int kElements = kSuperBlockElements;
  uint8_t hmask[kSuperBlockElements / 8];
  uint8_t qs[kSuperBlockElements / 4];
  uint8_t scales[kKScaleBytes];
  uint16_t d;
};
struct BlockQ8_K {  // activation-only in ggml: a float scale
  static constexpr int kElements = kSuperBlockElements;
  float d;
  int8_t qs[kSuperBlockElements];
  int16_t bsums[kSuperBlockElements / 16];
};

// GGUF's byte sizes and field offsets (GGUF_NOTES.md §2).
static_assert(sizeof(BlockQ4_K) == 144 && offsetof(BlockQ4_K, scales) == 4 &&
                  offsetof(BlockQ4_K, qs) == 16,
              "block_q4_K layout");
static_assert(sizeof(BlockQ5_K) == 176 && offsetof(BlockQ5_K, qh) == 16 &&
                  offsetof(BlockQ5_K, qs) == 48,
              "block_q5_K layout");
static_assert(sizeof(BlockQ6_K) == 210 && offsetof(BlockQ6_K, qh) == 128 &&
                  offsetof(BlockQ6_K, scales) == 192 && offsetof(BlockQ6_K, d) == 208,
              "block_q6_K layout");
static_assert(sizeof(BlockQ2_K) == 84, "block_q2_K layout");
static_assert(sizeof(BlockQ3_K) == 110, "block_q3_K layout");
static_assert(sizeof(BlockQ8_K) == 292, "block_q8_K layout");

struct ScaleMin {
  uint8_t scale;  // 0..63
  uint8_t min;    // 0..63
};

// ggml's get_scale_min_k4: sub-block j (0..7) of the 12 packed bytes. Sub-blocks 0..3 sit in the
// low 6 bits of bytes j and j+4; 4..7 keep their low nibbles in byte j+4 and their top two bits
// in the spare high bits of bytes j-4 (scale) and j (min).
inline ScaleMin scale_min_k4(int j, const uint8_t* scales) {
  if (j < 4) return {static_cast<uint8_t>(scales[j] & 63), static_cast<uint8_t>(scales[j + 4] & 63)};
  return {static_cast<uint8_t>((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4)),
          static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))};
}

// The inverse: packs eight 6-bit scales and mins into 12 bytes.
void pack_scale_min_k4(const uint8_t (&scale)[8], const uint8_t (&min)[8], uint8_t* out);

// The unsigned code (0..15 / 0..31 / 0..63) of value i (0..255) of one super-block.
int q4_k_code(const BlockQ4_K& block, int i);
int q5_k_code(const BlockQ5_K& block, int i);
int q6_k_code(const BlockQ6_K& block, int i);

// Dequantizes `num_elements` values (a multiple of 256) of a row, as ggml's dequantize_row_*:
// Q4_K/Q5_K: (d * sc) * q - (dmin * m) in float; Q6_K: (d * sc) * (q - 32).
void dequantize_row_q4_k(const void* row, int64_t num_elements, float* out);
void dequantize_row_q5_k(const void* row, int64_t num_elements, float* out);
void dequantize_row_q6_k(const void* row, int64_t num_elements, float* out);

// Quantizes `num_elements` floats (a multiple of 256) into super-blocks: per sub-block range
// [min(0, lo), hi] (Q4_K/Q5_K) or max |x| (Q6_K), scales quantized against the super-block's
// largest, codes rounded to nearest.
void quantize_row_q4_k(const float* x, int64_t num_elements, void* out);
void quantize_row_q5_k(const float* x, int64_t num_elements, void* out);
void quantize_row_q6_k(const float* x, int64_t num_elements, void* out);

}  // namespace troupe::model::quants
