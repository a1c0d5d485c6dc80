// Internal to matmul*.cpp: the packed tile layout of K-quant weights (Q4_K, Q5_K, Q6_K) and
// their tile kernels. The general tile scheme (16 output lanes per tile, 4-input groups as
// 32-bit lanes) is matmul_kernels.hpp's; the activations are the same per-32 Q8 rows
// (QuantizedRows) every quantized weight reads, so forward passes share them across types.
//
// A 256-value super-block is split into its eight 32-value sub-blocks; each becomes one packed
// block of 16 lanes, its sub-scales pre-multiplied into float (d * sc and dmin * m are exact in
// float: an 11-bit fp16 mantissa times a 6- or 8-bit integer):
//
//   Q4_K block (384 B): scale f32[16] | neg_min f32[16] | codes: Q4 nibble layout (256 B)
//   Q5_K block (640 B): scale f32[16] | neg_min f32[16] | codes: Q8 byte layout (512 B)
//   Q6_K block (640 B): scale_lo f32[16] | scale_hi f32[16] | codes: Q8 byte layout (512 B)
//
// scale = d * sc_j, neg_min = -(dmin * m_j); Q6_K's scale_lo / scale_hi are d * scales[2j] /
// d * scales[2j + 1] (inputs 0..15 / 16..31 of the block, i.e. 4-input groups 0..3 / 4..7).
// Codes are unsigned: 0..15 (Q4_K), 0..31 (Q5_K), 0..63 (Q6_K, weight = code - 32). Nibble and
// byte layouts are matmul_kernels.hpp's (Q4: byte [64p + 4l + j] = c[8p + j] | c[8p + 4 + j] << 4;
// Q8: byte [64g + 4l + j] = c[4g + j]), without their +128 / -8 offsets.
//
// Numerics (all paths, bit for bit; for every (row r, output o)):
//   lane[0..7] = 0, msum = 0; for block b in order:
//     s_lo = scale_lo * dx[b], s_hi = scale_hi * dx[b]   (Q4_K/Q5_K: both = scale * dx[b])
//     for group k = 0..7: isum_k = exact int32 dot of codes 4k..4k+3 with the int8 activations,
//                         minus 32 * (their activation sum) for Q6_K
//                         lane[k] = fma(k < 4 ? s_lo : s_hi, float(isum_k), lane[k])
//     Q4_K/Q5_K: msum = fma(neg_min, dx[b] * float(sum_x[b]), msum)
//   y = ((lane0+lane4) + (lane2+lane6)) + ((lane1+lane5) + (lane3+lane7));  Q4_K/Q5_K: y += msum
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/cpu/matmul_kernels.hpp"

namespace troupe::gpu::cpu::detail {

inline constexpr int kKHeaderBytes = 128;
inline constexpr int kQ4_KBlockBytes = kKHeaderBytes + 256;
inline constexpr int kQ5_KBlockBytes = kKHeaderBytes + 512;
inline constexpr int kQ6_KBlockBytes = kKHeaderBytes + 512;

inline constexpr bool is_kquant_format(PackedFormat f) {
  return f == PackedFormat::kQ4_K || f == PackedFormat::kQ5_K || f == PackedFormat::kQ6_K;
}

// Writes one output row (`num_inputs` values of ggml super-blocks) into lane `lane` of a tile.
void pack_kquant_lane(PackedFormat format, const uint8_t* row, int64_t num_inputs, uint8_t* tile,
                      int lane);

// The float dot of one ggml K-quant row with one quantized activation row, in the order above
// (matmul_reference's path: reads the ggml layout directly, no packing).
float kquant_reference_dot(model::TensorType type, const uint8_t* row, int64_t num_inputs,
                           const int8_t* xq, const float* dx, const int32_t* xsum);

void matmul_ktiles_scalar(const TileJob& job, int64_t tile_begin, int64_t tile_end);
void matmul_ktiles_avx2(const TileJob& job, int64_t tile_begin, int64_t tile_end);
void matmul_ktiles_avx512(const TileJob& job, int64_t tile_begin, int64_t tile_end);

}  // namespace troupe::gpu::cpu::detail
