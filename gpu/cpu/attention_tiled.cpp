// Tiled prefill attention (see attention_tiled.hpp): the driver, the scratch, and the scalar
// kernels that fix the order the SIMD ones (attention_tiled_simd.cpp) reproduce.
#include "gpu/cpu/attention_tiled.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "gpu/cpu/attention_kernels.hpp"
#include "gpu/cpu/attention_tiled_kernels.hpp"
#include "model/fp16.hpp"
#include "gpu/cpu/isa_target.hpp"

namespace troupe::gpu::cpu {
namespace {

std::atomic<PrefillAttentionPath> g_prefill_path{PrefillAttentionPath::kTiled};

// Keys per block in pass 1 and pass 3; multiples of 8 (a block starts a key group). Pass 1
// re-reads its block once per row block, so it stays in L1d (64 keys x head_dim 64 x 4 bytes =
// 16 KiB); pass 3 reloads each row's lane accumulators once per block and lane, so a longer
// block (read from L2) spends fewer of those.
constexpr int32_t kScoreKeyBlock = 64;
constexpr int32_t kValueKeyBlock = 256;

// Scores of a tile: [tokens * group][keys] floats, kept to half a core's L2 (1 MiB on Zen 4),
// the rest left to the K/V rows and value lanes streaming through it. With K/V converted once
// per head (ConvertedHead) the tile size matters little: one thread, 512 queries x 4,096 keys,
// SmolLM2 (group 3): 58-60 ms for 4, 8, 12, 20 and 32 tokens per tile alike; before that
// (conversion per tile) 8-12 tokens ran ~8% slower than 16-32. Smaller tiles split a chunk
// into more work items for the pool.
constexpr int64_t kScoresBudgetFloats = (512 << 10) / 4;
constexpr int32_t kMinTileTokens = 4;
constexpr int32_t kMaxTileTokens = 32;

int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

enum class Kernels { kScalar, kAvx2, kAvx512 };

Kernels pick_kernels(IsaLevel isa, int32_t head_dim) {
  if (!TROUPE_X86) return Kernels::kScalar;
  switch (isa) {
    case IsaLevel::kAvx512Vnni:
      if (head_dim % 16 == 0) return Kernels::kAvx512;
      [[fallthrough]];
    case IsaLevel::kAvx2: return head_dim % 8 == 0 ? Kernels::kAvx2 : Kernels::kScalar;
    case IsaLevel::kScalar: return Kernels::kScalar;
  }
  return Kernels::kScalar;
}

inline float hsum8_strided(const float* a, int64_t stride) {
  const float v0 = a[0] + a[4 * stride], v1 = a[stride] + a[5 * stride];
  const float v2 = a[2 * stride] + a[6 * stride], v3 = a[3 * stride] + a[7 * stride];
  return (v0 + v2) + (v1 + v3);
}

// Queries as the kernels read them: rows [rows][head_dim], row r = token r / group, head r % group.
void gather_queries(const AttentionTile& tile, int32_t head_dim, float* out) {
  const int32_t rows = tile.num_tokens * tile.group;
  const int64_t row_bytes = static_cast<int64_t>(head_dim) * 4;
  for (int32_t r = 0; r < rows; ++r) {
    const float* q = tile.q + static_cast<int64_t>(r / tile.group) * tile.q_stride +
                     static_cast<int64_t>(r % tile.group) * head_dim;
    std::memcpy(out + static_cast<int64_t>(r) * head_dim, q, row_bytes);
  }
}

// K of the block is rows [count][head_dim] at `keys`, or for the AVX-512 kernels the panels of
// the block (attention_tiled_kernels.hpp; ConvertedHead converts to the layout the level reads).
void tile_scores(Kernels kernels, const float* keys, int32_t first, int32_t count, int32_t hd,
                 const float* q, float scale, const detail::TileRows& rows) {
  switch (kernels) {
    case Kernels::kScalar:
      return detail::tile_scores_scalar(keys, first, count, hd, q, scale, rows);
    case Kernels::kAvx2: return detail::tile_scores_avx2(keys, first, count, hd, q, scale, rows);
    case Kernels::kAvx512:
      return detail::tile_scores_panels_avx512(keys, first, count, hd, q, scale, rows);
  }
}

void tile_values(Kernels kernels, const float* values, int32_t first, int32_t count, int32_t hd,
                 const detail::TileRows& rows, float* lanes) {
  switch (kernels) {
    case Kernels::kScalar: return detail::tile_values_scalar(values, first, count, hd, rows, lanes);
    case Kernels::kAvx2: return detail::tile_values_avx2(values, first, count, hd, rows, lanes);
    case Kernels::kAvx512: return detail::tile_values_avx512(values, first, count, hd, rows, lanes);
  }
}

void widen(const uint16_t* src, int64_t n, float* dst, IsaLevel isa) {
  if (TROUPE_X86 && isa == IsaLevel::kAvx512Vnni && n % 16 == 0) {
    detail::widen_fp16_avx512(src, n, dst);
  } else if (TROUPE_X86 && isa != IsaLevel::kScalar && n % 8 == 0) {
    detail::widen_fp16_avx2(src, n, dst);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = model::fp16_to_fp32(src[i]);
  }
}

// Keys [first, first + count) of fp16 rows src (key t at src + (t - first) * head_dim) into
// their lanes of the panels (attention_tiled_kernels.hpp; only the AVX-512 kernels read panels).
// A whole panel (16 keys from a panel boundary, e.g. every full KV block of 16 slots) is
// transposed in registers; the keys of a partial one are widened row by row and scattered.
void widen_to_panels(const uint16_t* src, int32_t first, int32_t count, int32_t hd, float* panels,
                     IsaLevel isa) {
  constexpr int32_t kChunk = 16;
  float part[kChunk];
  for (int32_t t = first; t < first + count;) {
    const uint16_t* row = src + static_cast<int64_t>(t - first) * hd;
    if (t % detail::kPanelKeys == 0 && first + count - t >= detail::kPanelKeys) {
      detail::widen_panel_avx512(row, hd, panels + detail::panel_offset(t, hd));
      t += detail::kPanelKeys;
      continue;
    }
    float* dst = panels + detail::panel_offset(t, hd) + t % detail::kPanelKeys;
    for (int32_t d0 = 0; d0 < hd; d0 += kChunk) {
      const int32_t n = std::min(kChunk, hd - d0);
      widen(row + d0, n, part, isa);
      for (int32_t d = 0; d < n; ++d) dst[(d0 + d) * detail::kPanelKeys] = part[d];
    }
    ++t;
  }
}

// K and V of keys [first, first + count) of one KV head -> fp32 at k, v: V as rows (row t at
// t * head_dim), K as rows too or as panels. Slots of one KV block are contiguous for one head:
// each run is one call.
void convert_keys(const KvLayerView& kv, const int32_t* block_table, int32_t kv_head, int32_t first,
                  int32_t count, bool k_panels, float* k, float* v, IsaLevel isa) {
  const int32_t hd = kv.head_dim;
  for (int32_t t = first; t < first + count;) {
    const int32_t slot = t % kv.block_size;
    const int32_t run = std::min(kv.block_size - slot, first + count - t);
    const size_t at = kv.offset(block_table[t / kv.block_size], kv_head, slot);
    const int64_t n = static_cast<int64_t>(run) * hd;
    if (k_panels) {
      widen_to_panels(kv.k + at, t, run, hd, k, isa);
    } else {
      widen(kv.k + at, n, k + static_cast<int64_t>(t) * hd, isa);
    }
    widen(kv.v + at, n, v + static_cast<int64_t>(t) * hd, isa);
    t += run;
  }
}

}  // namespace

void set_prefill_attention_path(PrefillAttentionPath path) {
  g_prefill_path.store(path);
}
PrefillAttentionPath prefill_attention_path() {
  return g_prefill_path.load();
}

void AlignedFloats::grow(int64_t n) {
  constexpr int64_t kAlignFloats = 16;  // 64 bytes
  if (static_cast<int64_t>(storage_.size()) >= n + kAlignFloats) return;
  std::vector<float> bigger(static_cast<size_t>(n + kAlignFloats), 0.0f);
  const auto base = reinterpret_cast<uintptr_t>(bigger.data());
  const int64_t offset = static_cast<int64_t>(((base + 63) & ~uintptr_t{63}) - base) / 4;
  if (!storage_.empty()) {
    std::copy(storage_.begin() + offset_, storage_.end() - (kAlignFloats - offset_),
              bigger.begin() + offset);
  }
  storage_.swap(bigger);
  offset_ = offset;
}

void AttentionTileScratch::grow(int32_t rows, int32_t num_keys, int32_t head_dim) {
  scores_stride_ = round_up(num_keys, 16);  // whole panels, rows 64-byte aligned
  scores_.grow(rows * scores_stride_);
  lanes_.grow(static_cast<int64_t>(rows) * 8 * head_dim);
  queries_.grow(static_cast<int64_t>(rows) * head_dim);
  if (static_cast<int32_t>(row_keys_.size()) < rows) row_keys_.resize(rows);
}

ConvertedHead::Rows ConvertedHead::get(const KvLayerView& kv, const int32_t* block_table,
                                       int32_t kv_head, int32_t num_keys, IsaLevel isa) {
  const int32_t hd = kv.head_dim;
  const bool k_panels = pick_kernels(isa, hd) == Kernels::kAvx512;
  if (block_table != block_table_ || kv_head != kv_head_ || k_panels != k_panels_) {
    block_table_ = block_table;
    kv_head_ = kv_head;
    k_panels_ = k_panels;
    num_keys_ = 0;
  }
  if (num_keys > num_keys_) {
    const int64_t rows = round_up(num_keys, k_panels ? detail::kPanelKeys : 8);
    k_.grow(rows * hd);
    v_.grow(rows * hd);
    convert_keys(kv, block_table, kv_head, num_keys_, num_keys - num_keys_, k_panels, k_.data(),
                 v_.data(), isa);
    // Whole 8-key groups (16-key panels) are read: zero the keys past the last one.
    if (k_panels) {
      float* last = k_.data() + detail::panel_offset(num_keys - 1, hd);
      for (int32_t d = 0; d < hd; ++d) {
        std::fill(last + d * detail::kPanelKeys + (num_keys - 1) % detail::kPanelKeys + 1,
                  last + (d + 1) * detail::kPanelKeys, 0.0f);
      }
    } else {
      std::fill(k_.data() + static_cast<int64_t>(num_keys) * hd, k_.data() + rows * hd, 0.0f);
    }
    std::fill(v_.data() + static_cast<int64_t>(num_keys) * hd, v_.data() + rows * hd, 0.0f);
    num_keys_ = num_keys;
  }
  return {k_.data(), v_.data()};
}

int32_t attention_tile_tokens(int32_t group, int32_t num_keys) {
  const int64_t per_token = static_cast<int64_t>(std::max(group, 1)) * round_up(num_keys, 8);
  const int64_t fit = kScoresBudgetFloats / std::max<int64_t>(per_token, 1);
  return static_cast<int32_t>(std::clamp<int64_t>(fit / 2 * 2, kMinTileTokens, kMaxTileTokens));
}

namespace {

// llama.cpp's tinyBLAS order for one score: 8 dim lanes, each an fma chain over dims j, j + 8,
// ..., then the hsum8 tree. Dim d of the key is at k[d * k_stride] (1: a row; kPanelKeys: a
// lane of a panel).
float score_scalar(const float* q, const float* k, int64_t k_stride, int32_t hd) {
  float acc[8] = {};
  for (int32_t d = 0; d < hd; ++d) acc[d % 8] = std::fma(q[d], k[d * k_stride], acc[d % 8]);
  return hsum8_strided(acc, 1);
}

}  // namespace

void detail::tile_scores_scalar(const float* keys, int32_t first, int32_t count, int32_t hd,
                                const float* q, float scale, const TileRows& rows) {
  for (int32_t r = 0; r < rows.num_rows; ++r) {
    const float* qr = q + static_cast<int64_t>(r) * hd;
    const int32_t end = std::min(first + count, rows.keys[r]);
    for (int32_t t = first; t < end; ++t) {
      const float* k = keys + static_cast<int64_t>(t - first) * hd;
      rows.s[r * rows.s_stride + t] = score_scalar(qr, k, 1, hd) * scale;
    }
  }
}

void detail::tile_scores_panels_scalar(const float* panels, int32_t first, int32_t count, int32_t hd,
                                       const float* q, float scale, const TileRows& rows) {
  for (int32_t r = 0; r < rows.num_rows; ++r) {
    const float* qr = q + static_cast<int64_t>(r) * hd;
    const int32_t end = std::min(first + count, rows.keys[r]);
    for (int32_t t = first; t < end; ++t) {
      const float* k = panels + panel_offset(t, hd) - panel_offset(first, hd) + t % kPanelKeys;
      rows.s[r * rows.s_stride + t] = score_scalar(qr, k, kPanelKeys, hd) * scale;
    }
  }
}

void detail::tile_values_scalar(const float* values, int32_t first, int32_t count, int32_t hd,
                                const TileRows& rows, float* lanes) {
  for (int32_t r = 0; r < rows.num_rows; ++r) {
    const float* p = rows.s + r * rows.s_stride;
    const int32_t end = std::min(first + count, rows.keys[r]);
    for (int32_t t = first; t < end; ++t) {
      float* a = lanes + (static_cast<int64_t>(r) * 8 + t % 8) * hd;
      const float* v = values + static_cast<int64_t>(t - first) * hd;
      for (int32_t d = 0; d < hd; ++d) a[d] = std::fma(p[t], v[d], a[d]);
    }
  }
}

namespace {

// Pass 1: every row's scores, one key block at a time (kept in L1d while every row block
// reads it).
void score_pass(const AttentionTile& tile, AttentionTileScratch& scratch,
                const detail::TileRows& rows, int32_t num_keys, Kernels kernels) {
  for (int32_t first = 0; first < num_keys; first += kScoreKeyBlock) {
    const int64_t at = kernels == Kernels::kAvx512 ? detail::panel_offset(first, tile.head_dim)
                                                   : static_cast<int64_t>(first) * tile.head_dim;
    tile_scores(kernels, tile.k + at, first,
                std::min(kScoreKeyBlock, num_keys - first), tile.head_dim, scratch.queries(),
                tile.scale, rows);
  }
}

// Pass 2: each row's exact softmax over its own keys, in place.
void softmax_pass(const detail::TileRows& rows, bool fp16_probabilities, Kernels kernels) {
  if (kernels == Kernels::kAvx512) return detail::softmax_rows_avx512(rows, fp16_probabilities);
  for (int32_t r = 0; r < rows.num_rows; ++r) {
    float* s = rows.s + r * rows.s_stride;
    if (kernels == Kernels::kScalar) {
      detail::softmax_row_scalar(s, rows.keys[r], fp16_probabilities);
    } else {
      detail::softmax_row_avx2(s, rows.keys[r], fp16_probabilities);
    }
  }
}

// Pass 3: every row's value lanes, one key block at a time.
void value_pass(const AttentionTile& tile, AttentionTileScratch& scratch,
                const detail::TileRows& rows, int32_t num_keys, Kernels kernels) {
  float* lanes = scratch.lanes();
  std::fill(lanes, lanes + static_cast<int64_t>(rows.num_rows) * 8 * tile.head_dim, 0.0f);
  for (int32_t first = 0; first < num_keys; first += kValueKeyBlock) {
    tile_values(kernels, tile.v + static_cast<int64_t>(first) * tile.head_dim, first,
                std::min(kValueKeyBlock, num_keys - first), tile.head_dim, rows, lanes);
  }
}

}  // namespace

void mask_tile_window(const AttentionTile& tile, float* scores, int64_t stride) {
  if (tile.window <= 0) return;
  for (int32_t i = 0; i < tile.num_tokens; ++i) {
    const int32_t first_key = tile.first_position + i + 1 - tile.window;
    mask_keys_before(scores + static_cast<int64_t>(i) * tile.group * stride, stride, tile.group,
                     first_key);
  }
}

void attention_tile(const AttentionTile& tile, AttentionTileScratch& scratch, IsaLevel isa) {
  const int32_t hd = tile.head_dim;
  const int32_t num_rows = tile.num_tokens * tile.group;
  const int32_t num_keys = tile.first_position + tile.num_tokens;  // the last token's
  const Kernels kernels = pick_kernels(isa, hd);
  scratch.grow(num_rows, num_keys, hd);
  int32_t* keys = scratch.row_keys();
  for (int32_t r = 0; r < num_rows; ++r) keys[r] = tile.first_position + r / tile.group + 1;
  const detail::TileRows rows{.num_rows = num_rows,
                              .keys = keys,
                              .s = scratch.scores(),
                              .s_stride = scratch.scores_stride()};
  gather_queries(tile, hd, scratch.queries());
  score_pass(tile, scratch, rows, num_keys, kernels);
  mask_tile_window(tile, rows.s, rows.s_stride);
  softmax_pass(rows, tile.fp16_probabilities, kernels);
  value_pass(tile, scratch, rows, num_keys, kernels);
  // out[d] = hsum8 over the 8 key lanes, as the per-token kernels end.
  const float* lanes = scratch.lanes();
  for (int32_t r = 0; r < num_rows; ++r) {
    float* out = tile.out + static_cast<int64_t>(r / tile.group) * tile.out_stride +
                 static_cast<int64_t>(r % tile.group) * hd;
    const float* a = lanes + static_cast<int64_t>(r) * 8 * hd;
    for (int32_t d = 0; d < hd; ++d) out[d] = hsum8_strided(a + d, hd);
  }
}

}  // namespace troupe::gpu::cpu
