// Test support for the CPU attention tests (cpu_attention_test, cpu_attention_tiled_bf16_test):
// a paged KV cache with random contents and tiles of prompt tokens over it, run by the per-token
// path or as tiles. Test threads only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "gpu/cpu/attention.hpp"
#include "gpu/cpu/attention_tiled.hpp"
#include "model/fp16.hpp"
#include "tests/gpu/cpu_test_util.hpp"

namespace troupe::gpu::cpu::testing {

struct Cache {
  std::vector<uint16_t> k, v;
  KvLayerView view;
  Cache(int32_t blocks, int32_t block_size, int32_t kv_heads, int32_t hd) {
    view.num_blocks = blocks;
    view.block_size = block_size;
    view.num_kv_heads = kv_heads;
    view.head_dim = hd;
    k.assign(view.block_elements() * blocks, 0);
    v.assign(view.block_elements() * blocks, 0);
    view.k = k.data();
    view.v = v.data();
  }
};

// Writes `n` tokens of random K/V into cache through `table`; returns them for reuse.
inline std::vector<float> fill(Cache& c, const std::vector<int32_t>& table, int32_t n, uint64_t seed) {
  const int32_t row = c.view.num_kv_heads * c.view.head_dim;
  auto kv = random_floats(static_cast<size_t>(2) * n * row, seed);
  for (int32_t t = 0; t < n; ++t) {
    kv_store(c.view, table[t / c.view.block_size], t % c.view.block_size, &kv[2 * t * row],
             &kv[(2 * t + 1) * row]);
  }
  return kv;
}

// Tiled prefill: a chunk of `num_tokens` prompt tokens at positions first, first + 1, ... of one
// sequence whose KV lies in shuffled blocks, q and out rows strided as in the forward pass.
struct TileCase {
  int32_t group, hd, first, num_tokens, bs;
  int32_t window = 0;  // sliding window (0: none), as AttentionTile::window
};

struct TileSetup {
  static constexpr int32_t kKvHeads = 2;
  Cache cache;
  std::vector<int32_t> table;
  std::vector<float> q;
  int64_t stride;  // floats per token in q and out (wider than the heads, like the qkv rows)
  float scale;

  explicit TileSetup(const TileCase& cs)
      : cache(blocks(cs) + 3, cs.bs, kKvHeads, cs.hd),
        table(blocks(cs)),
        stride(static_cast<int64_t>(kKvHeads) * cs.group * cs.hd + 8),
        scale(1.0f / std::sqrt(static_cast<float>(cs.hd))) {
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(cs.first + cs.num_tokens + cs.hd));
    for (auto& b : table) b += 2;
    fill(cache, table, cs.first + cs.num_tokens, 31 + cs.first);
    q = random_floats(stride * cs.num_tokens, 7 + cs.group, 3.0f);
    for (float& x : q) x = model::fp16_to_fp32(model::fp32_to_fp16(x));
  }
  static int32_t blocks(const TileCase& cs) {
    return (cs.first + cs.num_tokens + cs.bs - 1) / cs.bs;
  }

  std::vector<float> per_token(const TileCase& cs, IsaLevel isa, bool fp16p) {
    std::vector<float> out(q.size(), -1.0f),
        scratch(static_cast<size_t>(cs.group) * (cs.first + cs.num_tokens));
    for (int32_t i = 0; i < cs.num_tokens; ++i) {
      for (int32_t h = 0; h < kKvHeads; ++h) {
        const int64_t at = i * stride + static_cast<int64_t>(h) * cs.group * cs.hd;
        const int32_t first_key = cs.window > 0 ? std::max(0, cs.first + i + 1 - cs.window) : 0;
        attention_group(cache.view, table.data(), cs.first + i + 1, h, q.data() + at, cs.group,
                        scale, out.data() + at, scratch.data(), isa, fp16p, /*single_token=*/false,
                        first_key);
      }
    }
    return out;
  }

  // Tokens [i0, i0 + n) of the chunk as one tile of kv head h, reading K/V through `converted`.
  void run_tile(const TileCase& cs, int32_t i0, int32_t n, int32_t h, IsaLevel isa, bool fp16p,
                ConvertedHead& converted, AttentionTileScratch& scratch, float* out) {
    const auto rows = converted.get(cache.view, table.data(), h, cs.first + i0 + n, isa);
    const int64_t at = i0 * stride + static_cast<int64_t>(h) * cs.group * cs.hd;
    const AttentionTile tile{.k = rows.k,
                             .v = rows.v,
                             .head_dim = cs.hd,
                             .first_position = cs.first + i0,
                             .num_tokens = n,
                             .group = cs.group,
                             .q = q.data() + at,
                             .q_stride = stride,
                             .out = out + at,
                             .out_stride = stride,
                             .scale = scale,
                             .fp16_probabilities = fp16p,
                             .window = cs.window};
    attention_tile(tile, scratch, isa);
  }

  std::vector<float> tiled(const TileCase& cs, IsaLevel isa, bool fp16p,
                           AttentionTileScratch& scratch) {
    std::vector<float> out(q.size(), -1.0f);
    ConvertedHead converted;
    for (int32_t h = 0; h < kKvHeads; ++h) {
      run_tile(cs, 0, cs.num_tokens, h, isa, fp16p, converted, scratch, out.data());
    }
    return out;
  }
};

}  // namespace troupe::gpu::cpu::testing
