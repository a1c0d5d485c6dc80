// Paged KV write: each token's K and V (F32 columns of the fused QKV rows, after RoPE) stored at
// its slot of the paged cache, as fp16 or as FP8 E4M3 of value / scale (satfinite, round to
// nearest even: gpu/fp8_e4m3.hpp's fp32_to_fp8_e4m3 is the CPU twin, bit for bit).
//
//   cache of one layer, K and V apart:  [num_blocks][n_head_kv][block_size][head_dim] elements
//   token t goes to slot_mapping[t] = block * block_size + offset  (block from its table row)
//
// The layout is the CPU reference's (gpu/cpu/attention.hpp), so block ids mean the same thing.
// Thread-safety: enqueues on `stream`; tokens of one step write distinct slots.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda/kernel_types.cuh"

namespace troupe::gpu::cuda {

struct KvWriteArgs {
  const float* qkv = nullptr;
  int64_t ld = 0;
  int64_t k_column = 0;  // first K column in a row (n_head * head_dim)
  int64_t v_column = 0;  // first V column
  const int32_t* slot_mapping = nullptr;  // [num_tokens]
  int32_t num_tokens = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  KvElement element = KvElement::kF16;
  float k_scale = 1.0f;  // FP8: the cache holds k / k_scale and v / v_scale
  float v_scale = 1.0f;
};

void kv_write(const KvWriteArgs& args, cudaStream_t stream);

}  // namespace troupe::gpu::cuda
