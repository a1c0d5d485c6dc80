// Paged-attention test helpers shared by the CUDA op tests (cuda_ops_test.cpp,
// cuda_gemma3_test.cpp): a mixed batch over a shuffled paged cache, the CPU reference over it,
// and the device kernel run on it with an F32 output.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "gpu/cpu/attention.hpp"
#include "gpu/cuda/attention.cuh"
#include "model/fp16.hpp"
#include "tests/gpu/cpu_test_util.hpp"
#include "tests/gpu/cuda_test_util.hpp"

namespace troupe::gpu::cuda::testing {

// A mixed batch over a shuffled paged cache: for each sequence (context_len, num_tokens), its
// block-table row and the positions of its last num_tokens tokens.
struct PagedBatch {
  int32_t max_blocks = 0;
  std::vector<int32_t> tables, positions, table_rows;
  int32_t num_tokens() const { return static_cast<int32_t>(positions.size()); }
};

inline PagedBatch make_paged_batch(const std::vector<std::pair<int32_t, int32_t>>& seqs, int32_t bs,
                            int32_t num_blocks, uint32_t seed) {
  PagedBatch batch;
  for (auto [ctx, n] : seqs) batch.max_blocks = std::max(batch.max_blocks, (ctx + bs - 1) / bs);
  std::vector<int32_t> order(num_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  batch.tables.assign(seqs.size() * batch.max_blocks, -1);
  size_t next = 0;
  for (size_t r = 0; r < seqs.size(); ++r) {
    const auto [ctx, n] = seqs[r];
    for (int32_t b = 0; b < (ctx + bs - 1) / bs; ++b) {
      batch.tables[r * batch.max_blocks + b] = order.at(next++);
    }
    for (int32_t i = 0; i < n; ++i) {
      batch.positions.push_back(ctx - n + i);
      batch.table_rows.push_back(static_cast<int32_t>(r));
    }
  }
  return batch;
}

struct AttentionShape {
  int32_t n_head, n_head_kv, head_dim;
};

// Random fp16 keys and values, `n` of each.
struct Fp16Cache {
  std::vector<uint16_t> k, v;
};
inline Fp16Cache random_fp16_cache(size_t n, uint64_t k_seed, uint64_t v_seed) {
  const std::vector<float> kf = cpu::testing::random_floats(n, k_seed);
  const std::vector<float> vf = cpu::testing::random_floats(n, v_seed);
  Fp16Cache c{std::vector<uint16_t>(n), std::vector<uint16_t>(n)};
  for (size_t i = 0; i < n; ++i)
    c.k[i] = model::fp32_to_fp16(kf[i]), c.v[i] = model::fp32_to_fp16(vf[i]);
  return c;
}

// Random queries rounded to fp16 values, as the forward pass rounds them before attention.
inline std::vector<float> random_fp16_queries(size_t n, uint64_t seed) {
  std::vector<float> q = cpu::testing::random_floats(n, seed);
  for (float& x : q) x = model::fp16_to_fp32(model::fp32_to_fp16(x));
  return q;
}

// The CPU reference over an fp16 view of the cache, every token and KV head of `batch`; with a
// sliding window, token t's keys from positions[t] + 1 - sliding_window on (first_visible_key).
inline std::vector<float> reference_attention(const cpu::KvLayerView& view,
                                              const PagedBatch& batch, const std::vector<float>& q,
                                              AttentionShape s, float scale,
                                              int32_t sliding_window = 0) {
  const int64_t Q = s.n_head * s.head_dim;
  const int32_t group = s.n_head / s.n_head_kv;
  std::vector<float> want(batch.num_tokens() * Q);
  for (int32_t t = 0; t < batch.num_tokens(); ++t) {
    for (int32_t h = 0; h < s.n_head_kv; ++h) {
      const int64_t at = t * Q + static_cast<int64_t>(h) * group * s.head_dim;
      const int32_t first_key =
          sliding_window > 0 ? std::max(0, batch.positions[t] + 1 - sliding_window) : 0;
      cpu::attention_group_reference(view, &batch.tables[batch.table_rows[t] * batch.max_blocks],
                                     batch.positions[t] + 1, h, &q[at], group, scale, &want[at],
                                     first_key);
    }
  }
  return want;
}

// Runs paged_attention on `batch` (F32 output) with the cache already on the device.
inline std::vector<float> device_attention(const PagedBatch& batch, const std::vector<float>& q,
                                           const void* k_cache, const void* v_cache,
                                           AttentionShape s, int32_t bs, float scale,
                                           KvElement element = KvElement::kF16,
                                           float k_scale = 1.0f, float v_scale = 1.0f,
                                           int32_t sliding_window = 0) {
  const int64_t Q = s.n_head * s.head_dim;
  DeviceArray<float> dq(q), out(batch.num_tokens() * Q);
  DeviceArray<int32_t> d_pos(batch.positions), d_rows(batch.table_rows), d_tables(batch.tables);
  AttentionArgs a;
  a.q = dq.get();
  a.ld_q = Q;
  a.k_cache = k_cache;
  a.v_cache = v_cache;
  a.element = element;
  a.k_scale = k_scale;
  a.v_scale = v_scale;
  a.positions = d_pos.get();
  a.token_table_row = d_rows.get();
  a.block_tables = d_tables.get();
  a.max_blocks_per_seq = batch.max_blocks;
  a.num_tokens = batch.num_tokens();
  a.n_head = s.n_head;
  a.n_head_kv = s.n_head_kv;
  a.head_dim = s.head_dim;
  a.block_size = bs;
  a.scale = scale;
  a.sliding_window = sliding_window;
  a.out = out.get();
  a.ld_out = Q;
  a.out_f32 = true;
  paged_attention(a, nullptr);
  return out.download();
}

inline cpu::KvLayerView fp16_view(std::vector<uint16_t>& k, std::vector<uint16_t>& v,
                                  int32_t num_blocks, int32_t bs, AttentionShape s) {
  cpu::KvLayerView view;
  view.k = k.data();
  view.v = v.data();
  view.num_blocks = num_blocks;
  view.block_size = bs;
  view.num_kv_heads = s.n_head_kv;
  view.head_dim = s.head_dim;
  return view;
}

}  // namespace troupe::gpu::cuda::testing
