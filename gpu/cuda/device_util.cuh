// Device-side helpers shared by the .cu files (included by .cu files only): GGUF element
// decoding, warp and block reductions, order-preserving float keys, activation stores.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gpu/cuda/dequant_quants.cuh"
#include "gpu/cuda/kernel_types.cuh"
#include "model/quants/q4_q8.hpp"

namespace troupe::gpu::cuda::detail {

// Blocks of `threads` for a grid-stride loop over `total` elements: one element per thread up
// to 65,536 blocks, the loop covering the rest.
inline int grid_stride_blocks(int64_t total, int threads) {
  const int64_t wanted = (total + threads - 1) / threads;
  return static_cast<int>(wanted < 65536 ? wanted : 65536);
}

// RMSNorm's scale from the sum of a row's squares, as the CPU twin computes it
// (gpu/cpu/rmsnorm.cpp, ggml): the mean rounded to float, then 1 / sqrtf(mean + eps).
__device__ __forceinline__ float rms_scale(double sum_of_squares, int32_t n, float eps) {
  const float mean = static_cast<float>(sum_of_squares / static_cast<double>(n));
  return 1.0f / sqrtf(mean + eps);
}

// Element j of one GGUF row (GGUF_NOTES.md §3: Q4 nibbles are j / j+16, not interleaved).
// Q5_0/Q5_1 and the K-quants live in dequant_quants.cuh.
__device__ __forceinline__ float load_weight_element(const uint8_t* row, WeightType type, int64_t j) {
  switch (type) {
    case WeightType::kF32: return reinterpret_cast<const float*>(row)[j];
    case WeightType::kF16: return load_half_bytes(row + 2 * j);
    case WeightType::kBF16: {
      const unsigned int bits = static_cast<unsigned int>(row[2 * j] | (row[2 * j + 1] << 8)) << 16;
      return __uint_as_float(bits);
    }
    case WeightType::kQ4_0: {
      using Block = model::quants::BlockQ4_0;
      const uint8_t* blk = row + (j / Block::kElements) * sizeof(Block);
      const int i = static_cast<int>(j % Block::kElements);
      const uint8_t* qs = blk + offsetof(Block, qs);
      const int q = i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
      return load_half_bytes(blk + offsetof(Block, d)) * static_cast<float>(q - 8);
    }
    case WeightType::kQ4_1: {
      using Block = model::quants::BlockQ4_1;
      const uint8_t* blk = row + (j / Block::kElements) * sizeof(Block);
      const int i = static_cast<int>(j % Block::kElements);
      const uint8_t* qs = blk + offsetof(Block, qs);
      const int q = i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
      // Rounded twice, as the reference (compiled with -ffp-contract=off): nvcc would otherwise
      // fuse d * q + m into one fma and differ from the CPU's decoding in the last bit.
      return __fadd_rn(__fmul_rn(load_half_bytes(blk + offsetof(Block, d)), static_cast<float>(q)),
                       load_half_bytes(blk + offsetof(Block, m)));
    }
    case WeightType::kQ8_0: {
      using Block = model::quants::BlockQ8_0;
      const uint8_t* blk = row + (j / Block::kElements) * sizeof(Block);
      const int8_t q = static_cast<int8_t>(blk[offsetof(Block, qs) + j % Block::kElements]);
      return load_half_bytes(blk + offsetof(Block, d)) * static_cast<float>(q);
    }
    case WeightType::kQ5_0:
    case WeightType::kQ5_1:
    case WeightType::kQ4_K:
    case WeightType::kQ5_K:
    case WeightType::kQ6_K: return load_block_quant_element(row, type, j);
    default: return 0.0f;  // the types is_cuda_weight_type refuses at load never reach a kernel
  }
  return 0.0f;
}

__device__ __forceinline__ void store_act(void* out, int64_t index, float v, ActType type) {
  if (type == ActType::kF16) {
    static_cast<__half*>(out)[index] = __float2half_rn(v);
  } else {
    static_cast<__nv_bfloat16*>(out)[index] = __float2bfloat16_rn(v);
  }
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
  return v;
}

__device__ __forceinline__ unsigned long long warp_max_u64(unsigned long long v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const unsigned long long o = __shfl_xor_sync(0xFFFFFFFFu, v, offset);
    v = o > v ? o : v;
  }
  return v;
}

// Block-wide reductions: every thread of the block must call them (they synchronize), and every
// thread gets the result. `scratch` holds at least 32 elements and may be reused right after.
template <typename T>
__device__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = (blockDim.x + 31) / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < num_warps; ++w) total += scratch[w];
  return total;
}

__device__ inline float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = (blockDim.x + 31) / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = scratch[0];
  for (int w = 1; w < num_warps; ++w) m = fmaxf(m, scratch[w]);
  return m;
}

__device__ inline unsigned long long block_max_u64(unsigned long long v, unsigned long long* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = (blockDim.x + 31) / 32;
  v = warp_max_u64(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  unsigned long long m = scratch[0];
  for (int w = 1; w < num_warps; ++w) m = scratch[w] > m ? scratch[w] : m;
  return m;
}

// Maps a float to an unsigned key with the same order (for -inf < ... < +inf; NaNs at the ends).
__device__ __forceinline__ unsigned int ordered_key(float f) {
  const unsigned int u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

}  // namespace troupe::gpu::cuda::detail
