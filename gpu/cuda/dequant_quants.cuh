// Device decoding of single elements of the block formats beyond Q4_0/Q4_1/Q8_0: Q5_0, Q5_1 and
// the K-quant super-blocks Q4_K, Q5_K, Q6_K (included by .cu files only, through
// device_util.cuh). The twins are the reference dequantizers, model/quants/q5.cpp and
// model/quants/kquant.cpp: the layouts are their structs' and the bit positions theirs, and every
// product and sum is written with explicit round-to-nearest intrinsics so that nvcc's default
// fma contraction cannot make a value differ from the CPU's bit for bit.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "gpu/cuda/kernel_types.cuh"
#include "model/quants/kquant.hpp"
#include "model/quants/q5.hpp"

namespace troupe::gpu::cuda::detail {

namespace quants = model::quants;

// fp16 from two bytes with no alignment assumption: Q4_0 (18 B), Q5_0 (22 B), Q8_0 (34 B) and
// Q6_K (210 B) blocks are only 2-byte aligned inside a row.
__device__ __forceinline__ float load_half_bytes(const uint8_t* p) {
  const unsigned short bits = static_cast<unsigned short>(p[0] | (p[1] << 8));
  return __half2float(__ushort_as_half(bits));
}

// Q5_0 / Q5_1 code i (0..31): low nibble of qs[i % 16] (low for i < 16), fifth bit = bit i of
// the little-endian uint32 qh (read byte-wise: qh is only 2-byte aligned).
__device__ __forceinline__ int q5_code(const uint8_t* qh, const uint8_t* qs, int i) {
  const int low = i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
  return low | (((qh[i / 8] >> (i % 8)) & 1) << 4);
}

// ggml's get_scale_min_k4 (model/quants/kquant.hpp: scale_min_k4).
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t* s, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

static_assert(offsetof(quants::BlockQ4_K, d) == offsetof(quants::BlockQ5_K, d) &&
              offsetof(quants::BlockQ4_K, dmin) == offsetof(quants::BlockQ5_K, dmin) &&
              offsetof(quants::BlockQ4_K, scales) == offsetof(quants::BlockQ5_K, scales));

// Q4_K (144 B) / Q5_K (176 B) element i of a super-block: (d * sc) * q - (dmin * m). The two
// share every offset but qs's (static_asserted below).
__device__ __forceinline__ float q45_k_element(const uint8_t* blk, bool five_bits, int i) {
  const uint8_t* qs = blk + (five_bits ? offsetof(quants::BlockQ5_K, qs) : offsetof(quants::BlockQ4_K, qs));
  const uint8_t v = qs[32 * (i / 64) + i % 32];
  int q = (i % 64) < 32 ? (v & 0x0F) : (v >> 4);
  if (five_bits) q |= ((blk[offsetof(quants::BlockQ5_K, qh) + i % 32] >> (2 * (i / 64) + (i % 64) / 32)) & 1) << 4;
  int sc, m;
  scale_min_k4(i / 32, blk + offsetof(quants::BlockQ4_K, scales), sc, m);
  const float d1 = __fmul_rn(load_half_bytes(blk + offsetof(quants::BlockQ4_K, d)), static_cast<float>(sc));
  const float m1 = __fmul_rn(load_half_bytes(blk + offsetof(quants::BlockQ4_K, dmin)), static_cast<float>(m));
  return __fsub_rn(__fmul_rn(d1, static_cast<float>(q)), m1);
}

// Q6_K (210 B) element i: (d * scales[i / 16]) * (q - 32), q from ql / qh quarters.
__device__ __forceinline__ float q6_k_element(const uint8_t* blk, int i) {
  const int h = i / 128, k = (i % 128) / 32, l = i % 32;
  const uint8_t v = blk[offsetof(quants::BlockQ6_K, ql) + 64 * h + 32 * (k % 2) + l];
  const int low = k < 2 ? (v & 0x0F) : (v >> 4);
  const int q = low | (((blk[offsetof(quants::BlockQ6_K, qh) + 32 * h + l] >> (2 * k)) & 3) << 4);
  const float sc = static_cast<float>(static_cast<int8_t>(blk[offsetof(quants::BlockQ6_K, scales) + i / 16]));
  return __fmul_rn(__fmul_rn(load_half_bytes(blk + offsetof(quants::BlockQ6_K, d)), sc), static_cast<float>(q - 32));
}

// Element j of a row of one of the types above.
__device__ __forceinline__ float load_block_quant_element(const uint8_t* row, WeightType type,
                                                          int64_t j) {
  const int i32 = static_cast<int>(j % quants::kBlockElements);
  const int i256 = static_cast<int>(j % quants::kSuperBlockElements);
  switch (type) {
    case WeightType::kQ5_0: {
      using Block = quants::BlockQ5_0;
      const uint8_t* blk = row + (j / Block::kElements) * sizeof(Block);
      const int code = q5_code(blk + offsetof(Block, qh), blk + offsetof(Block, qs), i32);
      return __fmul_rn(static_cast<float>(code - 16), load_half_bytes(blk + offsetof(Block, d)));
    }
    case WeightType::kQ5_1: {
      using Block = quants::BlockQ5_1;
      const uint8_t* blk = row + (j / Block::kElements) * sizeof(Block);
      const int code = q5_code(blk + offsetof(Block, qh), blk + offsetof(Block, qs), i32);
      const float dq = __fmul_rn(static_cast<float>(code), load_half_bytes(blk + offsetof(Block, d)));
      return __fadd_rn(dq, load_half_bytes(blk + offsetof(Block, m)));
    }
    case WeightType::kQ4_K: return q45_k_element(row + (j / quants::kSuperBlockElements) * sizeof(quants::BlockQ4_K), false, i256);
    case WeightType::kQ5_K: return q45_k_element(row + (j / quants::kSuperBlockElements) * sizeof(quants::BlockQ5_K), true, i256);
    case WeightType::kQ6_K: return q6_k_element(row + (j / quants::kSuperBlockElements) * sizeof(quants::BlockQ6_K), i256);
    default: return 0.0f;  // the other types are decoded by load_weight_element
  }
}

}  // namespace troupe::gpu::cuda::detail
