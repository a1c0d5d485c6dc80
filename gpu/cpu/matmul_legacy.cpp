// The 32-value ("legacy") block formats in the batched matmul: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
// Packing from ggml blocks (model/quants/) into the tile layouts of matmul_kernels.hpp, and the
// ggml-layout block decoder of the reference path.
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "gpu/cpu/matmul_kernels.hpp"
#include "model/fp16.hpp"
#include "model/quants/q4_q8.hpp"
#include "model/quants/q5.hpp"

namespace troupe::gpu::cpu::detail {

using model::TensorType;
namespace quants = model::quants;

namespace {

template <class Block>
constexpr bool kHasMin = requires(Block b) { b.m; };

// The packed header: lane `lane`'s fp16 scale (and min) copied bit for bit.
template <class Block>
void put_header(const Block& blk, uint8_t* packed, int lane) {
  std::memcpy(packed + 2 * lane, &blk.d, 2);
  if constexpr (kHasMin<Block>) std::memcpy(packed + kPackedMins + 2 * lane, &blk.m, 2);
}

// The packed layout a block format goes to (matmul_kernels.hpp): Q4_0 / Q4_1 nibbles; Q8_0,
// Q5_0 (as Q8_0: matmul_kernels.hpp says why) and Q5_1 bytes.
template <class Block>
constexpr PackedFormat packed_format_of() {
  if constexpr (std::is_same_v<Block, quants::BlockQ4_0>) return PackedFormat::kQ4_0;
  if constexpr (std::is_same_v<Block, quants::BlockQ4_1>) return PackedFormat::kQ4_1;
  if constexpr (std::is_same_v<Block, quants::BlockQ5_1>) return PackedFormat::kQ5_1;
  return PackedFormat::kQ8_0;
}

// Weight code i of a block as the packed byte layout stores it: Q8_0 + 128, Q5_0 - 16 + 128,
// Q5_1 as it is.
template <class Block>
int packed_byte(const Block& blk, int i) {
  if constexpr (std::is_same_v<Block, quants::BlockQ8_0>) {
    return blk.qs[i] + 128;
  } else if constexpr (std::is_same_v<Block, quants::BlockQ5_0>) {
    return quants::q5_code(blk, i) - 16 + 128;
  } else {
    return quants::q5_code(blk, i);
  }
}

// One output row of 32-value blocks into lane `lane` of a tile. Nibble layout: byte
// [64p + 4l + j] = code(8p + j) | code(8p + 4 + j) << 4; byte layout: byte [64g + 4l + j] =
// packed_byte(4g + j).
template <class Block>
void pack_lane(const uint8_t* row, int64_t num_blocks, uint8_t* tile, int lane) {
  constexpr PackedFormat kFormat = packed_format_of<Block>();
  constexpr bool kNibbles = kFormat == PackedFormat::kQ4_0 || kFormat == PackedFormat::kQ4_1;
  for (int64_t b = 0; b < num_blocks; ++b) {
    const auto blk = quants::load_block<Block>(row, b);
    uint8_t* packed = tile + b * packed_block_bytes(kFormat);
    put_header(blk, packed, lane);
    uint8_t* dq = packed + packed_header_bytes(kHasMin<Block>);
    if constexpr (kNibbles) {
      for (int p = 0; p < 4; ++p) {
        for (int j = 0; j < 4; ++j) {
          const int lo = quants::q4_code(blk.qs, 8 * p + j), hi = quants::q4_code(blk.qs, 8 * p + 4 + j);
          dq[64 * p + 4 * lane + j] = static_cast<uint8_t>(lo | (hi << 4));
        }
      }
    } else {
      for (int i = 0; i < quants::kBlockElements; ++i) {
        dq[64 * (i / 4) + 4 * lane + i % 4] = static_cast<uint8_t>(packed_byte(blk, i));
      }
    }
  }
}

}  // namespace

void pack_legacy_lane(TensorType type, const uint8_t* row, int64_t num_inputs, uint8_t* tile,
                      int lane) {
  const int64_t nb = num_inputs / quants::kBlockElements;
  switch (type) {
    case TensorType::kQ4_0: pack_lane<quants::BlockQ4_0>(row, nb, tile, lane); return;
    case TensorType::kQ4_1: pack_lane<quants::BlockQ4_1>(row, nb, tile, lane); return;
    case TensorType::kQ8_0: pack_lane<quants::BlockQ8_0>(row, nb, tile, lane); return;
    case TensorType::kQ5_0: pack_lane<quants::BlockQ5_0>(row, nb, tile, lane); return;
    case TensorType::kQ5_1: pack_lane<quants::BlockQ5_1>(row, nb, tile, lane); return;
    default: throw std::logic_error("pack_legacy_lane: not a 32-value legacy type");
  }
}

LegacyBlock decode_legacy_block(TensorType type, const uint8_t* row, int64_t b) {
  LegacyBlock out{};
  switch (type) {
    case TensorType::kQ8_0: {
      const auto blk = quants::load_block<quants::BlockQ8_0>(row, b);
      out.d = model::fp16_to_fp32(blk.d);
      for (int i = 0; i < quants::kBlockElements; ++i) out.q[i] = blk.qs[i];
      return out;
    }
    case TensorType::kQ4_0: {
      const auto blk = quants::load_block<quants::BlockQ4_0>(row, b);
      out.d = model::fp16_to_fp32(blk.d);
      for (int i = 0; i < quants::kBlockElements; ++i) out.q[i] = quants::q4_code(blk.qs, i) - 8;
      return out;
    }
    case TensorType::kQ4_1: {
      const auto blk = quants::load_block<quants::BlockQ4_1>(row, b);
      out.d = model::fp16_to_fp32(blk.d);
      out.m = model::fp16_to_fp32(blk.m);
      for (int i = 0; i < quants::kBlockElements; ++i) out.q[i] = quants::q4_code(blk.qs, i);
      return out;
    }
    case TensorType::kQ5_0: {
      const auto blk = quants::load_block<quants::BlockQ5_0>(row, b);
      out.d = model::fp16_to_fp32(blk.d);
      for (int i = 0; i < quants::kBlockElements; ++i) out.q[i] = quants::q5_code(blk, i) - 16;
      return out;
    }
    case TensorType::kQ5_1: {
      const auto blk = quants::load_block<quants::BlockQ5_1>(row, b);
      out.d = model::fp16_to_fp32(blk.d);
      out.m = model::fp16_to_fp32(blk.m);
      for (int i = 0; i < quants::kBlockElements; ++i) out.q[i] = quants::q5_code(blk, i);
      return out;
    }
    default: throw std::logic_error("decode_legacy_block: not a 32-value legacy type");
  }
}

}  // namespace troupe::gpu::cpu::detail
