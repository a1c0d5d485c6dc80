// Internal to attention_tiled*.cpp (and their tests): the score kernels that read K in 16-key
// panels, the layout ConvertedHead keeps for the AVX-512 tiles. Any thread may call them on
// buffers it owns.
//
// A panel holds 16 consecutive keys g*16 .. g*16+15 transposed, [head_dim][16]: element (t, d) at
// panels + (t / 16) * 16 * head_dim + d * 16 + t % 16. With the keys in the vector lanes, the
// chunk-order score (attention_kernels.hpp)
//   score = hsum8(lane j: fma over dims j, j+8, ...) * scale
// is 16 keys' scores at once with vertical operations only: eight accumulators (one per dim
// lane j) each take their fma chain in dim order, then the fixed tree
// ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7)) runs across the accumulators, so every lane (key)
// sees exactly the scalar operations, and no horizontal sum is left to do.
#pragma once

#include <cstdint>

#include "gpu/cpu/attention_kernels.hpp"

namespace troupe::gpu::cpu::detail {

inline constexpr int32_t kPanelKeys = 16;

// Offset in floats of key t's panel from the panels of key 0.
inline int64_t panel_offset(int32_t t, int32_t head_dim) {
  return static_cast<int64_t>(t / kPanelKeys) * kPanelKeys * head_dim;
}

// The panel of 16 consecutive keys from their fp16 rows (key i at keys + i * head_dim):
// panel[d * 16 + i] = fp16_to_fp32(keys[i * head_dim + d]). head_dim % 16 == 0. The conversion
// is exact, so only the layout can differ from widening key by key; converting the whole prefix
// for every prefill chunk made the key-by-key scatter ~5 % of a long prompt's small-chunk
// prefill.
void widen_panel_avx512(const uint16_t* keys, int32_t head_dim, float* panel);

// Scores of keys [first, first + count) for every row, as tile_scores_scalar, K read from the
// panels of that block (panels: the panel of key `first`, first % 16 == 0). q: [rows][head_dim].
// Each row's scores are written for its keys below its count; the AVX-512 form may also write
// scores past a row's count up to the next multiple of 16 (never read).
void tile_scores_panels_scalar(const float* panels, int32_t first, int32_t count,
                               int32_t head_dim, const float* q, float scale,
                               const TileRows& rows);
// head_dim % 8 == 0.
void tile_scores_panels_avx512(const float* panels, int32_t first, int32_t count,
                               int32_t head_dim, const float* q, float scale,
                               const TileRows& rows);

}  // namespace troupe::gpu::cpu::detail
