// The Walsh-Hadamard rotation llama.cpp applies around a quantized KV cache (its KV cache's
// attn_rot_k / attn_rot_v, on by default for a quantized cache when head_dim % 64 == 0): Q and K
// rotated in blocks of kv_rotation_block(head_dim) values, V and the attention output in blocks
// of 64. The rotation is orthonormal and its own inverse, so scores and outputs are unchanged in
// exact arithmetic, while each rotated row spreads its outliers over the block: q8_0 then loses
// less. Computed as ggml's CPU fast transform (ggml_compute_forward_fwht): the block scaled by
// 1/sqrtf(n), then the butterflies (u + v, u - v) for len = 1, 2, ..., n/2 — each an exact IEEE
// operation per value, so any vector width gives these bits: the AVX-512 form does the same
// butterflies sixteen values at a time (the first four stages inside a register).
//
// Thread-safety: pure functions over caller-owned buffers.
#pragma once

#include <cstdint>

#include "gpu/cpu/cpu_features.hpp"

namespace troupe::gpu::cpu {

// The V (and output) rotation's block.
inline constexpr int32_t kKvRotationVBlock = 64;

// The Q/K rotation's block for a head of head_dim values: the largest power of two >= 64 that
// divides head_dim; 0 (no rotation) when 64 does not.
constexpr int32_t kv_rotation_block(int32_t head_dim) {
  if (head_dim <= 0 || head_dim % 64 != 0) return 0;
  int32_t n = 64;
  while (head_dim % (2 * n) == 0) n *= 2;
  return n;
}

// Rotates x[0, count) in place, block by block (count % block == 0, block a power of two). Every
// isa gives the same bits.
void hadamard_rotate(float* x, int64_t count, int32_t block, IsaLevel isa = IsaLevel::kScalar);

}  // namespace troupe::gpu::cpu
