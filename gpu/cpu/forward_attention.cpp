// The attention part of the forward pass (see forward.hpp): each layer's work planned as prompt
// tiles and per-token head runs, and run on the pool. Split from forward.cpp, which keeps the
// rest of the layer.
#include "gpu/cpu/forward.hpp"

#include <algorithm>

namespace troupe::gpu::cpu {
namespace {

// The attention reduction order of the token at `position` (see attention.hpp). llama.cpp runs
// a prompt as one batch (sgemm order; a 1-token prompt is a decode) and each generated token
// alone (decode order). Keying the order on what the token is, not on the span it came in,
// keeps a sequence's logits bit-identical however its prompt is chunked and after a
// recompute; batches that do not say where the prompt ends fall back to the span size.
bool uses_decode_order(const SequenceSlice& s, int32_t position) {
  if (s.num_prompt_tokens < 0) return s.num_tokens == 1;
  return s.num_prompt_tokens == 1 || position >= s.num_prompt_tokens;
}

}  // namespace

void LlamaForward::plan_attention(const StepBatch& b, int32_t group, bool tiled,
                                  AttentionPlan& plan) {
  plan.work.clear();
  plan.singles.clear();
  for (size_t si = 0; si < b.seqs.size(); ++si) {
    const SequenceSlice& s = b.seqs[si];
    const int32_t seq = static_cast<int32_t>(si);
    for (int32_t i = 0; i < s.num_tokens;) {
      const int32_t token = s.token_offset + i;
      const int32_t position = b.positions[token];
      if (!tiled || uses_decode_order(s, position)) {
        plan.singles.push_back({.first_token = token,
                                .num_tokens = 1,
                                .seq = seq,
                                .tiled = false,
                                .cost = position + 1});
        ++i;
        continue;
      }
      // A run of chunk-order tokens (consecutive positions), cut into tiles sized for its last
      // token's context, the longest (last) tile first: a thread that runs several tiles of one
      // head in a row converts its K/V rows once, on the first.
      int32_t run = 1;
      while (i + run < s.num_tokens && !uses_decode_order(s, b.positions[token + run])) ++run;
      const int32_t tile = attention_tile_tokens(group, position + run);
      for (int32_t k = (run - 1) / tile * tile; k >= 0; k -= tile) {
        const int32_t n = std::min(tile, run - k);
        plan.work.push_back({.first_token = token + k,
                             .num_tokens = n,
                             .seq = seq,
                             .tiled = true,
                             .cost = static_cast<int64_t>(n) * (position + k + n)});
      }
      i += run;
    }
  }
  plan.num_tiles = static_cast<int64_t>(plan.work.size());
  plan.work.insert(plan.work.end(), plan.singles.begin(), plan.singles.end());
}

void LlamaForward::plan_head_runs(int64_t num_singles, int32_t n_head_kv, int32_t group,
                                  int threads, std::vector<HeadRun>& runs) {
  runs.clear();
  const int64_t groups = num_singles * n_head_kv;
  const int64_t split = threads > 1 ? groups % threads : 0;
  const int32_t parts = static_cast<int32_t>(std::min<int64_t>(std::max(threads, 1), group));
  const int32_t per_part = (group + parts - 1) / parts;
  auto add = [&](int64_t g, int32_t first, int32_t count) {
    runs.push_back({.single = static_cast<int32_t>(g / n_head_kv),
                    .first_head = static_cast<int32_t>(g % n_head_kv) * group + first,
                    .num_heads = count});
  };
  for (int64_t g = 0; g < groups - split; ++g) add(g, 0, group);
  for (int32_t first = 0; first < group; first += per_part) {
    for (int64_t g = groups - split; g < groups; ++g) {
      add(g, first, std::min(per_part, group - first));
    }
  }
}

void LlamaForward::reset_attention_scratch(size_t threads) {
  if (tile_scratch_.size() < threads) tile_scratch_.resize(threads);  // grown once
  if (converted_.size() < threads) converted_.resize(threads);
  if (config_.kv_dtype == KvDtype::kQ8_0 && q8_scratch_.size() < threads) q8_scratch_.resize(threads);
  for (ConvertedHead& h : converted_) h.reset();  // this layer's KV: nothing held is valid
  if (config_.prefill_attention == PrefillAttentionPrecision::kBf16 &&
      converted_bf16_.size() < threads) {
    converted_bf16_.resize(threads);
    bf16_scratch_.resize(threads);
  }
  for (ConvertedHeadBf16& h : converted_bf16_) h.reset();
}

void LlamaForward::attend_head_run(const StepBatch& b, const KvLayerView& kv, int32_t layer,
                                   const HeadRun& r, int t) {
  const model::LlamaConfig& c = weights_.config();
  const int32_t group = c.n_head / c.n_head_kv;
  const int32_t hd = c.head_dim;
  const int64_t W = c.q_dim() + 2 * c.kv_dim();
  const AttentionWork& w = attn_plan_.work[attn_plan_.num_tiles + r.single];
  const SequenceSlice& s = b.seqs[w.seq];
  const int32_t* table = table_of(b, s, layer);
  const int32_t position = b.positions[w.first_token];
  if (kv.dtype == KvDtype::kQ8_0) {
    attend_q8(b, kv, layer, w, r.first_head, r.num_heads, t);
    return;
  }
  attention_group(kv, table, position + 1, r.first_head / group,
                  qkv_.data() + w.first_token * W + static_cast<int64_t>(r.first_head) * hd,
                  r.num_heads, c.attention_scale(),
                  attn_.data() + static_cast<int64_t>(w.first_token) * c.q_dim() +
                      static_cast<int64_t>(r.first_head) * hd,
                  attn_scratch_[t].data(), config_.isa, /*fp16_probabilities=*/true,
                  /*single_token=*/uses_decode_order(s, position),
                  c.first_visible_key(layer, position));
}

void LlamaForward::attend_tile(const StepBatch& b, const KvLayerView& kv, int32_t layer,
                               const AttentionWork& w, int32_t h, int t) {
  const model::LlamaConfig& c = weights_.config();
  const int32_t group = c.n_head / c.n_head_kv;
  const int32_t hd = c.head_dim;
  const int64_t W = c.q_dim() + 2 * c.kv_dim();
  if (kv.dtype == KvDtype::kQ8_0) {
    attend_q8(b, kv, layer, w, h * group, group, t);
    return;
  }
  const SequenceSlice& s = b.seqs[w.seq];
  const int32_t* table = table_of(b, s, layer);
  const int32_t position = b.positions[w.first_token];
  AttentionTile tile{.head_dim = hd,
                     .first_position = position,
                     .num_tokens = w.num_tokens,
                     .group = group,
                     .q = qkv_.data() + w.first_token * W + static_cast<int64_t>(h) * group * hd,
                     .q_stride = W,
                     .out = attn_.data() + static_cast<int64_t>(w.first_token) * c.q_dim() +
                            static_cast<int64_t>(h) * group * hd,
                     .out_stride = c.q_dim(),
                     .scale = c.attention_scale(),
                     .fp16_probabilities = true,
                     .window = c.is_sliding(layer) ? c.sliding_window : 0};
  if (config_.prefill_attention == PrefillAttentionPrecision::kBf16) {
    const ConvertedHeadBf16::Words words =
        converted_bf16_[t].get(kv, table, h, position + w.num_tokens, bf16_kernels_);
    attention_tile_bf16({.shape = tile, .k = words.k, .v = words.v}, tile_scratch_[t],
                        bf16_scratch_[t], bf16_kernels_);
    return;
  }
  const ConvertedHead::Rows rows =
      converted_[t].get(kv, table, h, position + w.num_tokens, config_.isa);
  tile.k = rows.k;
  tile.v = rows.v;
  attention_tile(tile, tile_scratch_[t], config_.isa);
}

void LlamaForward::attend_q8(const StepBatch& b, const KvLayerView& kv, int32_t layer,
                              const AttentionWork& w, int32_t first_head, int32_t num_heads,
                              int t) {
  const model::LlamaConfig& c = weights_.config();
  const int32_t hd = c.head_dim;
  const int64_t W = c.q_dim() + 2 * c.kv_dim();
  const int64_t head_offset = static_cast<int64_t>(first_head) * hd;
  attention_q8_0(kv, table_of(b, b.seqs[w.seq], layer), first_head / (c.n_head / c.n_head_kv),
                 {.first_position = b.positions[w.first_token],
                  .num_rows = w.num_tokens,
                  .window = c.is_sliding(layer) ? c.sliding_window : 0,
                  .num_heads = num_heads,
                  .q = qkv_.data() + w.first_token * W + head_offset,
                  .q_stride = W,
                  .out = attn_.data() + static_cast<int64_t>(w.first_token) * c.q_dim() + head_offset,
                  .out_stride = c.q_dim(),
                  .scale = c.attention_scale()},
                 q8_scratch_[t], config_.isa);
}

void LlamaForward::attention(const StepBatch& b, int32_t layer, ThreadPool& pool) {
  const model::LlamaConfig& c = weights_.config();
  const int32_t group = c.n_head / c.n_head_kv;
  const KvLayerView kv = kv_layer(layer);
  plan_attention(b, group, prefill_attention_path() == PrefillAttentionPath::kTiled, attn_plan_);
  reset_attention_scratch(static_cast<size_t>(pool.num_threads()));
  const std::vector<AttentionWork>& work = attn_plan_.work;
  const int64_t num_tiles = attn_plan_.num_tiles;
  int64_t total_keys = 0;
  for (const AttentionWork& w : work) total_keys += w.cost;
  // Under ~1k query-head x key products (~25 us of work here) waking the pool costs about what
  // splitting saves.
  const bool serial = total_keys * c.n_head < 1024;
  // Items: [tiles x KV head 0 | tiles x KV head 1 | ... | per-token head runs]. A thread claims
  // a contiguous range, so its tiles mostly share one head and its converted K/V rows. A
  // per-token item is a run of query heads of one KV head (plan_head_runs): its K/V rows are
  // converted once for the whole run, and the runs are cut so that a batch-1 decode (3 KV heads
  // for SmolLM2) still keeps both threads busy. Each query head's scores, softmax and value sums
  // are its own whatever the run (the same bits).
  plan_head_runs(static_cast<int64_t>(attn_plan_.singles.size()), c.n_head_kv, group,
                 serial ? 1 : pool.num_threads(), attn_plan_.head_runs);
  const int64_t tiled_items = num_tiles * c.n_head_kv;
  auto run = [&](int64_t begin, int64_t end, int t) {
    for (int64_t item = begin; item < end; ++item) {
      if (item >= tiled_items) {
        attend_head_run(b, kv, layer, attn_plan_.head_runs[item - tiled_items], t);
      } else {
        attend_tile(b, kv, layer, work[item % num_tiles], static_cast<int32_t>(item / num_tiles),
                    t);
      }
    }
  };
  const int64_t items = tiled_items + static_cast<int64_t>(attn_plan_.head_runs.size());
  if (serial) {
    run(0, items, 0);
  } else {
    pool.parallel_for(items, run);
  }
}

}  // namespace troupe::gpu::cpu
