// Q5_0 / Q5_1 weights in the batched matmul: packing from ggml blocks (layouts in
// matmul_kernels.hpp), and the ggml-layout block decoder of the reference path for every
// 32-value legacy type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).
#include <cstring>
#include <stdexcept>

#include "model/fp16.hpp"
#include "gpu/cpu/matmul_kernels.hpp"
#include "model/quant_q5.hpp"

namespace troupe::gpu::cpu::detail {

using model::TensorType;
namespace q5 = model::q5;

void pack_q5_lane(TensorType type, const uint8_t* row, int64_t num_inputs, uint8_t* tile,
                  int lane) {
  const bool has_min = type == TensorType::kQ5_1;
  const int src_bytes = has_min ? q5::kQ5_1Bytes : q5::kQ5_0Bytes;
  const int bb = has_min ? kQ5_1BlockBytes : kQ8_0BlockBytes;
  const int header = has_min ? 64 : 32;
  // Q5_0 into the Q8_0 layout: weight code - 16 stored +128, i.e. code + 112.
  const int bias = has_min ? 0 : 112;
  for (int64_t b = 0; b < num_inputs / kQuantBlock; ++b) {
    const uint8_t* s = row + b * src_bytes;
    uint8_t* d = tile + b * bb;
    std::memcpy(d + 2 * lane, s, 2);
    if (has_min) std::memcpy(d + 32 + 2 * lane, s + q5::kQ5_1M, 2);
    for (int g = 0; g < 8; ++g) {
      for (int j = 0; j < 4; ++j) {
        const int code = has_min ? q5::q5_1_code(s, 4 * g + j) : q5::q5_0_code(s, 4 * g + j);
        d[header + 64 * g + 4 * lane + j] = static_cast<uint8_t>(code + bias);
      }
    }
  }
}

LegacyBlock decode_legacy_block(TensorType type, const uint8_t* row, int64_t b) {
  LegacyBlock out{};
  switch (type) {
    case TensorType::kQ8_0: {
      const uint8_t* blk = row + b * 34;
      out.d = model::fp16_to_fp32(model::load_u16(blk));
      for (int i = 0; i < 32; ++i) out.q[i] = static_cast<int8_t>(blk[2 + i]);
      return out;
    }
    case TensorType::kQ4_0:
    case TensorType::kQ4_1: {
      const bool has_min = type == TensorType::kQ4_1;
      const uint8_t* blk = row + b * (has_min ? 20 : 18);
      out.d = model::fp16_to_fp32(model::load_u16(blk));
      if (has_min) out.m = model::fp16_to_fp32(model::load_u16(blk + 2));
      const uint8_t* qs = blk + (has_min ? 4 : 2);
      const int offset = has_min ? 0 : 8;
      for (int i = 0; i < 16; ++i) {
        out.q[i] = (qs[i] & 0x0F) - offset;
        out.q[i + 16] = (qs[i] >> 4) - offset;
      }
      return out;
    }
    case TensorType::kQ5_0: {
      const uint8_t* blk = row + b * q5::kQ5_0Bytes;
      out.d = model::fp16_to_fp32(model::load_u16(blk));
      for (int i = 0; i < 32; ++i) out.q[i] = q5::q5_0_code(blk, i) - 16;
      return out;
    }
    case TensorType::kQ5_1: {
      const uint8_t* blk = row + b * q5::kQ5_1Bytes;
      out.d = model::fp16_to_fp32(model::load_u16(blk));
      out.m = model::fp16_to_fp32(model::load_u16(blk + q5::kQ5_1M));
      for (int i = 0; i < 32; ++i) out.q[i] = q5::q5_1_code(blk, i);
      return out;
    }
    default: throw std::logic_error("decode_legacy_block: not a 32-value legacy type");
  }
}

}  // namespace troupe::gpu::cpu::detail
