// Internal to matmul*.cpp: the packed tile layouts and the per-ISA tile kernels.
//
// A tile holds kTileOutputs (16) output rows; lane l of every vector below is output 16t + l.
// Quantized formats are block-major (one 32-input block of all 16 lanes after another):
//
//   Q4_0 block (288 B):  d[16] fp16 | quants[256]
//   Q4_1 block (320 B):  d[16] fp16 | m[16] fp16 | quants[256]
//   Q8_0 block (544 B):  d[16] fp16 | quants[512]
//   Q5_1 block (576 B):  d[16] fp16 | m[16] fp16 | quants[512]
//
//   Q4 quants: 4 chunks p of 64 B; byte [64p + 4l + j] = w[l][8p + j] | w[l][8p + 4 + j] << 4
//              (low nibbles: inputs 8p..8p+3, high nibbles: inputs 8p+4..8p+7; unsigned 0..15)
//   Q8 quants: 8 chunks g of 64 B; byte [64g + 4l + j] = uint8(w[l][4g + j] + 128)
//              (Q5_1: the same chunks holding the unsigned 5-bit codes 0..31, no offset)
//
// Q5_0 weights are packed as Q8_0 (byte = code - 16 + 128): a Q5_0 x Q8_0 dot in ggml's order is
// the Q8_0 x Q8_0 one on the same integers, so it needs no kernels of its own. Q5_1 codes are
// unsigned and its min term is Q4_1's, so it gets the byte layout with Q4_1's header.
//
// So a 64-byte chunk is one zmm whose 32-bit lane l holds 4 consecutive inputs of output l: one
// vpdpbusd against a broadcast dword of 4 activations adds 4 products to each of 16 outputs.
// Float formats are input-major: for each input k, 16 lanes (F32: 64 B, F16/BF16: 32 B).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/cpu/matmul.hpp"

namespace troupe::gpu::cpu::detail {

// The header of a packed block: one fp16 per lane for the scales, then as many for the mins.
inline constexpr int kPackedMins = 2 * kTileOutputs;
inline constexpr int packed_header_bytes(bool has_min) { return (has_min ? 2 : 1) * kPackedMins; }

inline constexpr int kQ4_0BlockBytes = packed_header_bytes(false) + 256;
inline constexpr int kQ4_1BlockBytes = packed_header_bytes(true) + 256;
inline constexpr int kQ8_0BlockBytes = packed_header_bytes(false) + 512;
inline constexpr int kQ5_1BlockBytes = packed_header_bytes(true) + 512;

// The 32-value block formats (matmul_legacy.cpp packs them) and those among them with a min.
inline constexpr bool is_legacy_format(PackedFormat f) {
  return f == PackedFormat::kQ4_0 || f == PackedFormat::kQ4_1 || f == PackedFormat::kQ8_0 ||
         f == PackedFormat::kQ5_1;
}
inline constexpr bool has_packed_min(PackedFormat f) {
  return f == PackedFormat::kQ4_1 || f == PackedFormat::kQ5_1;
}

inline constexpr int packed_block_bytes(PackedFormat f) {
  switch (f) {
    case PackedFormat::kQ4_0: return kQ4_0BlockBytes;
    case PackedFormat::kQ4_1: return kQ4_1BlockBytes;
    case PackedFormat::kQ8_0: return kQ8_0BlockBytes;
    case PackedFormat::kQ5_1: return kQ5_1BlockBytes;
    case PackedFormat::kKQuantRows: return 0;  // not tiled
    case PackedFormat::kF32: return 64;   // per input
    case PackedFormat::kF16: return 32;   // per input
    case PackedFormat::kBF16: return 32;  // per input
  }
  return 0;
}

// Everything a tile kernel needs, as raw pointers (kernels are compiled for other ISAs and must
// not instantiate shared inline code; see isa_target.hpp).
struct TileJob {
  PackedFormat format;
  const std::byte* tiles;  // tile 0
  size_t tile_bytes;
  int64_t num_outputs;
  int64_t num_inputs;
  int64_t num_rows;
  // Quantized activations (quantized formats).
  const int8_t* xq;
  const float* dx;
  const int32_t* xsum;
  const float* xsx;
  const int32_t* xgb;  // QuantizedRows::group_bias
  // Float activations (float formats).
  const float* x;
  int64_t ldx;
  float* y;
  int64_t ldy;
};

// Activation quantization of rows [row_begin, row_end) (QuantizedRows' arrays, raw).
struct QuantizeJob {
  const float* x;
  int64_t ldx;
  int64_t num_cols;
  int8_t* qs;
  float* scale;
  int32_t* sum;
  float* scaled_sum;
  int32_t* group_bias;
};
void quantize_rows_avx2(const QuantizeJob& job, int64_t row_begin, int64_t row_end);
void quantize_rows_avx512(const QuantizeJob& job, int64_t row_begin, int64_t row_end);

// Writes one output row of `num_inputs` values of a 32-value block type (Q4_0, Q4_1, Q8_0, Q5_0
// into the Q8_0 layout, Q5_1) into lane `lane` of a tile (matmul_legacy.cpp).
void pack_legacy_lane(model::TensorType type, const uint8_t* row, int64_t num_inputs,
                      uint8_t* tile, int lane);

// One 32-value block `b` of a ggml row of a legacy type (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0) as signed
// integer weights (offsets applied), scale and min (0 without one): matmul_reference's decoder.
struct LegacyBlock {
  int32_t q[32];
  float d;
  float m;
};
LegacyBlock decode_legacy_block(model::TensorType type, const uint8_t* row, int64_t b);

void matmul_tiles_scalar(const TileJob& job, int64_t tile_begin, int64_t tile_end);
void matmul_tiles_avx2(const TileJob& job, int64_t tile_begin, int64_t tile_end);
void matmul_tiles_avx512(const TileJob& job, int64_t tile_begin, int64_t tile_end);

}  // namespace troupe::gpu::cpu::detail
