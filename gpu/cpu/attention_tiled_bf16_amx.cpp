// AMX-BF16 kernels of the bf16 tiled prefill attention (attention_tiled_bf16.hpp): the same
// layouts as the AVX512-BF16 kernels feed tdpbf16ps directly. A 16-key K panel's first 16 dim
// pairs are a B tile ([pairs][16 keys] words), 16 query rows' 32 dims an A tile; 16 rows' 32
// probabilities are an A tile, 16 key pairs of V's 16 dims a B tile. One tdpbf16ps does
// 16 x 16 x 32 multiply-adds: attention stops being the long prompt's bottleneck.
//
// The tile unit sums each 32-element row of products in its own order (not vdpbf16ps' pair by
// pair), so these kernels match the scalar twin within float rounding, not bit for bit
// (cpu_attention_tiled_bf16_test bounds the difference).
//
// Every call configures the tiles (8 tiles of 16 rows x 64 bytes) and releases them, so the
// thread carries no AMX state between calls. Rows are processed 16 at a time: the caller pads
// the rows' buffers (queries, probabilities, scores, outputs) to a multiple of 16.
#include <algorithm>
#include <cstring>

#include "gpu/cpu/attention_tiled_bf16.hpp"
#include "gpu/cpu/isa_target.hpp"

namespace troupe::gpu::cpu {

#if TROUPE_X86
namespace {

constexpr int32_t kPanelKeys = 16;
constexpr int kTileBytes = 64;  // one tile row: 16 fp32, 16 words of bf16 pairs

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

TROUPE_TARGET_AMX void configure_tiles() {
  TileConfig config;
  for (int i = 0; i < 8; ++i) {
    config.colsb[i] = kTileBytes;
    config.rows[i] = 16;
  }
  // GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes of the config, which then
  // drops the stores of the rest: escape the whole struct first.
  __asm__ __volatile__("" : : "r"(&config) : "memory");
  _tile_loadconfig(&config);
}

// Scores of 16 query rows (HD32 = hd / 32 A tiles, resident in tiles 2-5) against the Pc
// panels at k, stored at s: tiles 0-1 scores, 6-7 keys. The intrinsics take tile numbers as
// literal tokens, hence one block per 32-dim chunk.
template <int HD32, int Pc>
TROUPE_TARGET_AMX void score_panels(const uint32_t* k, int64_t panel_words, float* s,
                                    int64_t s_bytes) {
  const uint32_t* k1 = k + panel_words;  // the second panel (Pc == 2)
  _tile_zero(0);
  if constexpr (Pc > 1) _tile_zero(1);
  _tile_loadd(6, k, kTileBytes);
  _tile_dpbf16ps(0, 2, 6);
  if constexpr (Pc > 1) {
    _tile_loadd(7, k1, kTileBytes);
    _tile_dpbf16ps(1, 2, 7);
  }
  if constexpr (HD32 > 1) {
    _tile_loadd(6, k + 256, kTileBytes);
    _tile_dpbf16ps(0, 3, 6);
    if constexpr (Pc > 1) {
      _tile_loadd(7, k1 + 256, kTileBytes);
      _tile_dpbf16ps(1, 3, 7);
    }
  }
  if constexpr (HD32 > 2) {
    _tile_loadd(6, k + 512, kTileBytes);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (Pc > 1) {
      _tile_loadd(7, k1 + 512, kTileBytes);
      _tile_dpbf16ps(1, 4, 7);
    }
  }
  if constexpr (HD32 > 3) {
    _tile_loadd(6, k + 768, kTileBytes);
    _tile_dpbf16ps(0, 5, 6);
    if constexpr (Pc > 1) {
      _tile_loadd(7, k1 + 768, kTileBytes);
      _tile_dpbf16ps(1, 5, 7);
    }
  }
  _tile_stored(0, s, s_bytes);
  if constexpr (Pc > 1) _tile_stored(1, s + kPanelKeys, s_bytes);
}

// Scores of rows [r0, r0 + 16) against keys [first, end) of the block, in whole panels.
template <int HD32>
TROUPE_TARGET_AMX void scores_rows(const uint32_t* panels, int32_t first, int32_t end,
                                   const uint32_t* q, const detail::TileRows& rows, int32_t r0) {
  constexpr int32_t hd = 32 * HD32;
  constexpr int64_t panel_words = kPanelKeys * hd / 2;
  const uint32_t* qr = q + static_cast<int64_t>(r0) * hd / 2;
  _tile_loadd(2, qr, hd * 2);
  if constexpr (HD32 > 1) _tile_loadd(3, qr + 16, hd * 2);
  if constexpr (HD32 > 2) _tile_loadd(4, qr + 32, hd * 2);
  if constexpr (HD32 > 3) _tile_loadd(5, qr + 48, hd * 2);
  float* s = rows.s + r0 * rows.s_stride;
  const int64_t s_bytes = rows.s_stride * 4;
  int32_t t = first;
  for (; t + kPanelKeys < end; t += 2 * kPanelKeys) {  // both panels hold keys below end
    score_panels<HD32, 2>(panels + (t - first) / kPanelKeys * panel_words, panel_words, s + t,
                          s_bytes);
  }
  for (; t < end; t += kPanelKeys) {
    score_panels<HD32, 1>(panels + (t - first) / kPanelKeys * panel_words, panel_words, s + t,
                          s_bytes);
  }
}

// Outputs of rows [r0, r0 + 16), dims [d0, d0 + 16 Dc) over key pairs [0, pairs) (a multiple
// of 16): tiles 0-3 outputs, 4 probabilities, 5-6 values.
template <int Dc>
TROUPE_TARGET_AMX void values_rows(const uint32_t* v, int32_t pairs, int32_t hd, const uint32_t* p,
                                   int64_t p_stride, int32_t r0, int32_t d0, float* out,
                                   int64_t out_stride) {
  _tile_zero(0);
  if constexpr (Dc > 1) _tile_zero(1);
  if constexpr (Dc > 2) _tile_zero(2);
  if constexpr (Dc > 3) _tile_zero(3);
  const int64_t v_bytes = static_cast<int64_t>(hd) * 4;
  for (int32_t u = 0; u < pairs; u += 16) {
    _tile_loadd(4, p + r0 * p_stride + u, p_stride * 4);
    const uint32_t* vu = v + static_cast<int64_t>(u) * hd + d0;
    _tile_loadd(5, vu, v_bytes);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (Dc > 1) {
      _tile_loadd(6, vu + 16, v_bytes);
      _tile_dpbf16ps(1, 4, 6);
    }
    if constexpr (Dc > 2) {
      _tile_loadd(5, vu + 32, v_bytes);
      _tile_dpbf16ps(2, 4, 5);
    }
    if constexpr (Dc > 3) {
      _tile_loadd(6, vu + 48, v_bytes);
      _tile_dpbf16ps(3, 4, 6);
    }
  }
  float* o = out + r0 * out_stride + d0;
  const int64_t o_bytes = out_stride * 4;
  _tile_stored(0, o, o_bytes);
  if constexpr (Dc > 1) _tile_stored(1, o + 16, o_bytes);
  if constexpr (Dc > 2) _tile_stored(2, o + 32, o_bytes);
  if constexpr (Dc > 3) _tile_stored(3, o + 48, o_bytes);
}

TROUPE_TARGET_AMX void release_tiles() {
  _tile_release();
}

}  // namespace

void detail::tile_scores_bf16_amx(const uint32_t* panels, int32_t first, int32_t count, int32_t hd,
                                  const uint32_t* q, const TileRows& rows) {
  configure_tiles();
  for (int32_t r0 = 0; r0 < rows.num_rows; r0 += 16) {
    int32_t end = 0;  // the row block's last key in this block
    for (int32_t r = r0; r < std::min(r0 + 16, rows.num_rows); ++r) {
      end = std::max(end, std::min(rows.keys[r], first + count));
    }
    if (end <= first) continue;
    switch (hd) {
      case 32: scores_rows<1>(panels, first, end, q, rows, r0); break;
      case 64: scores_rows<2>(panels, first, end, q, rows, r0); break;
      case 128: scores_rows<4>(panels, first, end, q, rows, r0); break;
      default: break;  // attention_tile_bf16 only picks AMX for these
    }
  }
  release_tiles();
}

void detail::tile_values_bf16_amx(const uint32_t* v, int32_t pairs, int32_t hd, const uint32_t* p,
                                  int64_t p_stride, int32_t num_rows, float* out,
                                  int64_t out_stride) {
  configure_tiles();
  const int32_t padded_pairs = (pairs + 15) / 16 * 16;
  for (int32_t r0 = 0; r0 < num_rows; r0 += 16) {
    int32_t d0 = 0;
    for (; d0 + 64 <= hd; d0 += 64) {
      values_rows<4>(v, padded_pairs, hd, p, p_stride, r0, d0, out, out_stride);
    }
    for (; d0 < hd; d0 += 16) {
      values_rows<1>(v, padded_pairs, hd, p, p_stride, r0, d0, out, out_stride);
    }
  }
  release_tiles();
}

#else

void detail::tile_scores_bf16_amx(const uint32_t* panels, int32_t first, int32_t count, int32_t hd,
                                  const uint32_t* q, const TileRows& rows) {
  tile_scores_bf16_scalar(panels, first, count, hd, q, rows);
}
void detail::tile_values_bf16_amx(const uint32_t* v, int32_t pairs, int32_t hd, const uint32_t* p,
                                  int64_t p_stride, int32_t num_rows, float* out,
                                  int64_t out_stride) {
  tile_values_bf16_scalar(v, pairs, hd, p, p_stride, num_rows, out, out_stride);
}

#endif

}  // namespace troupe::gpu::cpu
