// ggml's K-quant super-blocks (Q4_K, Q5_K, Q6_K): byte layouts, the 6-bit scale unpacking, a
// scalar dequantizer per type (the reference every kernel is tested against) and a simple
// quantizer (for dummy weights and tests; not llama.cpp's error-minimizing search).
//
// Layouts (ggml-common.h; 256 values per super-block, fp16 = IEEE binary16, no padding):
//   block_q4_K (144 B): d fp16 @0 | dmin fp16 @2 | scales[12] @4 | qs[128] @16
//   block_q5_K (176 B): d fp16 @0 | dmin fp16 @2 | scales[12] @4 | qh[32] @16 | qs[128] @48
//   block_q6_K (210 B): ql[128] @0 | qh[64] @128 | scales[16] int8 @192 | d fp16 @208
// Q4_K/Q5_K value i of sub-block j (32 values each): d * sc_j * q - dmin * m_j.
// Q6_K value i (16-value sub-block i / 16): (d * scales[i / 16]) * (q - 32).
//
// Thread-safety: pure functions; callable from any thread.
#pragma once

#include <cstdint>

namespace troupe::model::kquant {

inline constexpr int kSuperBlock = 256;

inline constexpr int kQ4KBytes = 144;
inline constexpr int kQ5KBytes = 176;
inline constexpr int kQ6KBytes = 210;

// Byte offsets inside a super-block.
inline constexpr int kQ4KScales = 4, kQ4KQs = 16;
inline constexpr int kQ5KScales = 4, kQ5KQh = 16, kQ5KQs = 48;
inline constexpr int kQ6KQl = 0, kQ6KQh = 128, kQ6KScales = 192, kQ6KD = 208;

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
int q4_k_code(const uint8_t* block, int i);
int q5_k_code(const uint8_t* block, int i);
int q6_k_code(const uint8_t* block, int i);

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

}  // namespace troupe::model::kquant
