// Rotary position embedding, NORM mode (llama GGUF): adjacent pairs (2i, 2i+1) of the first
// n_rot dimensions of each head rotate by
//   theta_i = freq_scale * (pos * base^(-2i / n_rot) / factor_i)
// dimensions past n_rot pass through. freq_scale = 1 / linear scaling factor; factor_i comes
// from rope_freqs.weight (Llama 3.1+ "llama3" scaling) and is 1 without it. This is ggml's
// rope_ext with freq_factors: ggml_rope_cache_init passes theta / ff to rope_yarn, which
// multiplies by freq_scale (ggml-cpu/ops.cpp; ggml-cuda/rope.cu does the same per element).
//
// Thread-safety: pure functions over caller-owned buffers.
#pragma once

#include <cstdint>

#include "gpu/cpu/cpu_features.hpp"

namespace troupe::gpu::cpu {

struct RopeParams {
  int32_t n_rot = 0;         // rotated dims per head (even)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;   // linear scaling: 1 / factor
  // n_rot / 2 divisors of the per-pair frequencies (rope_freqs.weight), or nullptr for none.
  // Factors of exactly 1.0 give the same bits as nullptr (x / 1.0f == x).
  const float* freq_factors = nullptr;
};

// cos/sin tables for one position: n_rot / 2 entries each. Computed as llama.cpp does (theta
// advanced by repeated multiplication in float) so results track its logits closely.
void rope_table(int32_t pos, const RopeParams& p, float* cos_out, float* sin_out);

// Rotates num_heads heads of head_dim floats (contiguous) in place with a table from rope_table.
// Every isa gives the same bits (the same fma and multiplies per element).
void rope_apply(float* x, int32_t num_heads, int32_t head_dim, int32_t n_rot, const float* cos_t,
                const float* sin_t, IsaLevel isa = IsaLevel::kScalar);

// NEOX mode (qwen2): pairs (i, i + n_rot / 2) instead of (2i, 2i + 1).
void rope_apply_neox(float* x, int32_t num_heads, int32_t head_dim, int32_t n_rot,
                     const float* cos_t, const float* sin_t, IsaLevel isa = IsaLevel::kScalar);

// Direct formula in double precision (freq_factors included), for tests.
void rope_reference(float* x, int32_t num_heads, int32_t head_dim, int32_t pos,
                    const RopeParams& p);

}  // namespace troupe::gpu::cpu
