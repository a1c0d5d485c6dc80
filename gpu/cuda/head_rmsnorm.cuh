// Per-head RMSNorm of Q and K in place, in the fused QKV rows (F32), before RoPE: gemma3's
// attn_q_norm / attn_k_norm (LlamaConfig::qk_norm). Each head's head_dim values are normed as one
// row, with the math of rmsnorm.cuh (sum of squares in double, the mean rounded to float,
// (x * scale) * weight): the CPU twin is gpu/cpu/rmsnorm.hpp's rmsnorm() over each head
// (LlamaForward::prepare_qkv_row). Every Q head shares q_weight, every K head k_weight.
//
// Thread-safety: enqueues on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace troupe::gpu::cuda {

struct HeadRmsNormArgs {
  float* qkv = nullptr;  // rows of ld floats: Q [n_head * head_dim], then K [n_head_kv * head_dim]
  int64_t ld = 0;
  int32_t num_tokens = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  const float* q_weight = nullptr;  // [head_dim]
  const float* k_weight = nullptr;  // [head_dim]
  float eps = 1e-6f;
};

void head_rmsnorm_inplace(const HeadRmsNormArgs& args, cudaStream_t stream);

}  // namespace troupe::gpu::cuda
