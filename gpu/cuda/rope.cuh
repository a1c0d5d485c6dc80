// Rotary position embedding in place on the Q and K columns of the fused QKV rows (F32).
// NORM mode (llama GGUFs) rotates adjacent pairs (2i, 2i+1); NEOX (qwen2) pairs (i, i + n_rot/2).
// theta_i = freq_scale * (pos * theta_scale^i / factor_i) with theta_scale = freq_base^(-2/n_rot),
// advanced by repeated float multiplication as llama.cpp (and the CPU reference) does; factor_i
// from rope_freqs.weight (Llama 3.1+), 1 without it (ggml rope_ext's freq_factors). Then Q times
// q_scale in F32 (gemma3 scales the queries, not the scores: LlamaConfig::query_scale), and
// optionally rounded to fp16 values, as the CPU reference does before attention against fp16 keys.
//
// Thread-safety: enqueues on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace troupe::gpu::cuda {

struct RopeArgs {
  float* qkv = nullptr;              // rows of ld floats: Q [n_head*head_dim] then K [n_head_kv*head_dim]
  int64_t ld = 0;
  const int32_t* positions = nullptr;  // [num_tokens]
  int32_t num_tokens = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t n_rot = 0;                 // even, <= head_dim, <= 512
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  const float* freq_factors = nullptr;  // device [n_rot / 2] divisors, or nullptr for none
  bool neox = false;
  float q_scale = 1.0f;  // Q *= q_scale after the rotation, before the rounding
  bool round_q_to_f16 = true;
};

void rope_inplace(const RopeArgs& args, cudaStream_t stream);

}  // namespace troupe::gpu::cuda
