// Rotary position embedding, NORM mode (llama GGUF): adjacent pairs (2i, 2i+1) of the first
// n_rot dimensions of each head rotate by theta_i = (pos * freq_scale) * base^(-2i / n_rot);
// dimensions past n_rot pass through. freq_scale = 1 / linear scaling factor.
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

// Direct formula in double precision, for tests.
void rope_reference(float* x, int32_t num_heads, int32_t head_dim, int32_t pos,
                    const RopeParams& p);

}  // namespace troupe::gpu::cpu
