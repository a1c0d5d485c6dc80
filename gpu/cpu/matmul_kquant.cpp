// K-quant weights in the batched matmul: packing from ggml super-blocks, the scalar tile path
// and the reference dot (layout and numerics in matmul_kquant.hpp).
#include "gpu/cpu/matmul_kquant.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "model/fp16.hpp"
#include "model/quants/kquant.hpp"

namespace troupe::gpu::cpu::detail {

using model::TensorType;
namespace quants = model::quants;

// A packed block is one K-quant sub-block: it meets one activation block.
static_assert(quants::kKSubBlockElements == kQuantBlock);

namespace {

// One 32-value sub-block as the kernels see it: two scales, the min term, unsigned codes.
struct SubBlock {
  float scale_lo = 0, scale_hi = 0, neg_min = 0;
  uint8_t codes[kQuantBlock] = {};
};

// Sub-block j (0..7) of a Q4_K / Q5_K super-block.
template <class Block>
SubBlock unpack_q45_sub_block(const Block& blk, int j) {
  SubBlock s;
  const quants::ScaleMin sm = quants::scale_min_k4(j, blk.scales);
  s.scale_lo = s.scale_hi = model::fp16_to_fp32(blk.d) * static_cast<float>(sm.scale);
  s.neg_min = -(model::fp16_to_fp32(blk.dmin) * static_cast<float>(sm.min));
  for (int l = 0; l < kQuantBlock; ++l) {
    const int i = kQuantBlock * j + l;
    if constexpr (std::is_same_v<Block, quants::BlockQ4_K>) {
      s.codes[l] = static_cast<uint8_t>(quants::q4_k_code(blk, i));
    } else {
      s.codes[l] = static_cast<uint8_t>(quants::q5_k_code(blk, i));
    }
  }
  return s;
}

// Sub-block j (0..7) of Q6_K super-block: its two 16-value scales become scale_lo / scale_hi.
SubBlock unpack_q6_sub_block(const quants::BlockQ6_K& blk, int j) {
  SubBlock s;
  const float d = model::fp16_to_fp32(blk.d);
  s.scale_lo = d * static_cast<float>(blk.scales[2 * j]);
  s.scale_hi = d * static_cast<float>(blk.scales[2 * j + 1]);
  for (int l = 0; l < kQuantBlock; ++l) s.codes[l] = static_cast<uint8_t>(quants::q6_k_code(blk, kQuantBlock * j + l));
  return s;
}

// Sub-block j (0..7) of super-block `sb` of a ggml row.
SubBlock unpack_sub_block(TensorType type, const uint8_t* row, int64_t sb, int j) {
  switch (type) {
    case TensorType::kQ4_K: return unpack_q45_sub_block(quants::load_block<quants::BlockQ4_K>(row, sb), j);
    case TensorType::kQ5_K: return unpack_q45_sub_block(quants::load_block<quants::BlockQ5_K>(row, sb), j);
    case TensorType::kQ6_K: return unpack_q6_sub_block(quants::load_block<quants::BlockQ6_K>(row, sb), j);
    default: throw std::logic_error("unpack_sub_block: not a K-quant type");
  }
}

TensorType source_type_of(PackedFormat f) {
  return f == PackedFormat::kQ4_K ? TensorType::kQ4_K
         : f == PackedFormat::kQ5_K ? TensorType::kQ5_K
                                    : TensorType::kQ6_K;
}

int block_bytes_of(PackedFormat f) {
  return f == PackedFormat::kQ4_K ? kQ4_KBlockBytes : kQ5_KBlockBytes;
}

void put_float(uint8_t* p, float f) { std::memcpy(p, &f, 4); }
float get_float(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

// The fold of the eight group lanes (ggml's hsum_float_8 order, as the Q4/Q8 formats).
float fold_lanes(const float (&lanes)[8]) {
  return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

}  // namespace

void pack_kquant_lane(PackedFormat format, const uint8_t* row, int64_t num_inputs, uint8_t* tile,
                      int lane) {
  const TensorType type = source_type_of(format);
  const int bb = block_bytes_of(format);
  for (int64_t sb = 0; sb < num_inputs / quants::kSuperBlockElements; ++sb) {
    for (int j = 0; j < quants::kKSubBlocks; ++j) {
      const SubBlock s = unpack_sub_block(type, row, sb, j);
      uint8_t* d = tile + (8 * sb + j) * bb;
      put_float(d + 4 * lane, s.scale_lo);
      put_float(d + 64 + 4 * lane, format == PackedFormat::kQ6_K ? s.scale_hi : s.neg_min);
      uint8_t* q = d + kKHeaderBytes;
      for (int p = 0; p < 4 && format == PackedFormat::kQ4_K; ++p) {
        for (int i = 0; i < 4; ++i) {
          q[64 * p + 4 * lane + i] = static_cast<uint8_t>(s.codes[8 * p + i] | (s.codes[8 * p + 4 + i] << 4));
        }
      }
      for (int g = 0; g < 8 && format != PackedFormat::kQ4_K; ++g) {
        for (int i = 0; i < 4; ++i) q[64 * g + 4 * lane + i] = s.codes[4 * g + i];
      }
    }
  }
}

float kquant_reference_dot(TensorType type, const uint8_t* row, int64_t num_inputs,
                           const int8_t* xq, const float* dx, const int32_t* xsum) {
  const int offset = type == TensorType::kQ6_K ? 32 : 0;
  float lanes[8] = {};
  float msum = 0.0f;
  for (int64_t b = 0; b < num_inputs / kQuantBlock; ++b) {
    const SubBlock s = unpack_sub_block(type, row, b / quants::kKSubBlocks,
                                        static_cast<int>(b % quants::kKSubBlocks));
    const float s_lo = s.scale_lo * dx[b], s_hi = s.scale_hi * dx[b];
    for (int k = 0; k < 8; ++k) {
      int32_t isum = 0;
      for (int i = 4 * k; i < 4 * k + 4; ++i) isum += (s.codes[i] - offset) * xq[kQuantBlock * b + i];
      lanes[k] = std::fma(k < 4 ? s_lo : s_hi, static_cast<float>(isum), lanes[k]);
    }
    if (type != TensorType::kQ6_K) {
      msum = std::fma(s.neg_min, dx[b] * static_cast<float>(xsum[b]), msum);
    }
  }
  const float y = fold_lanes(lanes);
  return type == TensorType::kQ6_K ? y : y + msum;
}

// The portable path: the packed layout walked lane by lane.
void matmul_ktiles_scalar(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
  const int64_t nb = job.num_inputs / kQuantBlock;
  const int bb = block_bytes_of(job.format);
  const bool q6 = job.format == PackedFormat::kQ6_K;
  const bool nibbles = job.format == PackedFormat::kQ4_K;
  for (int64_t t = tile_begin; t < tile_end; ++t) {
    const auto* tile = reinterpret_cast<const uint8_t*>(job.tiles + t * job.tile_bytes);
    for (int64_t r = 0; r < job.num_rows; ++r) {
      const int8_t* xq = job.xq + r * job.num_inputs;
      for (int lane = 0; lane < kTileOutputs; ++lane) {
        const int64_t o = t * kTileOutputs + lane;
        if (o >= job.num_outputs) break;
        float lanes[8] = {};
        float msum = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* blk = tile + b * bb;
          const float dxb = job.dx[r * nb + b];
          const float w0 = get_float(blk + 4 * lane), w1 = get_float(blk + 64 + 4 * lane);
          const float s_lo = w0 * dxb, s_hi = (q6 ? w1 : w0) * dxb;
          const uint8_t* q = blk + kKHeaderBytes;
          for (int k = 0; k < 8; ++k) {
            int32_t isum = 0;
            for (int i = 0; i < 4; ++i) {
              const int in = 4 * k + i;
              const int code = nibbles ? (q[64 * (in / 8) + 4 * lane + in % 4] >> (in % 8 < 4 ? 0 : 4)) & 0x0F
                                       : q[64 * k + 4 * lane + i];
              isum += (code - (q6 ? 32 : 0)) * xq[kQuantBlock * b + in];
            }
            lanes[k] = std::fma(k < 4 ? s_lo : s_hi, static_cast<float>(isum), lanes[k]);
          }
          if (!q6) msum = std::fma(w1, dxb * static_cast<float>(job.xsum[r * nb + b]), msum);
        }
        const float y = fold_lanes(lanes);
        job.y[r * job.ldy + o] = q6 ? y : y + msum;
      }
    }
  }
}

}  // namespace troupe::gpu::cpu::detail
