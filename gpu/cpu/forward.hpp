// The llama forward pass on the CPU for one StepBatch: packed weights, paged KV memory (fp16 or
// q8_0) and the per-step scratch buffers. Computes logits for the sampling rows only. The Gemma 3 seams
// (model/llama_config.hpp) slot into the same pass: the embedding scale, per-head QK RMSNorm
// before RoPE, the query scale, sliding-window masks and RoPE base per layer, the post-attention
// and post-FFN norms before the residual adds, and GEGLU (geglu.hpp) for SwiGLU.
//
//   per layer:  h = RMSNorm(x)           -> int8 rows (once)   -> [Wq;Wk;Wv] one packed pass
//               RoPE(q, k) -> K,V into blocks (all tokens)    -> attention per (prompt tile
//                                                                or generated token, kv head)
//               x += Wo o ;  h = RMSNorm(x) -> [Wgate;Wup] one pass -> SwiGLU -> x += Wdown a
//
// Every per-token computation is row-local (matmul rows, norms, attention items), so a
// sequence's logits do not depend on the rest of the batch or on how its prompt was chunked.
//
// Thread-safety: one step at a time (the CpuBackend serializes); not re-entrant.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpu/cpu/attention.hpp"
#include "gpu/cpu/attention_q8.hpp"
#include "gpu/cpu/attention_tiled.hpp"
#include "gpu/cpu/attention_tiled_bf16.hpp"
#include "gpu/cpu/cpu_features.hpp"
#include "gpu/cpu/matmul.hpp"
#include "gpu/cpu/thread_pool.hpp"
#include "gpu/forward_observer.hpp"
#include "gpu/kv_groups.hpp"
#include "gpu/step.hpp"
#include "model/llama_weights.hpp"

namespace troupe::gpu::cpu {

// Observes a step's named intermediates (gpu/forward_observer.hpp); the CPU pass also shows
// attn_out and ffn_out (the projections before their residual add).
using ForwardObserver = gpu::ForwardObserver;

struct ForwardConfig {
  int32_t num_blocks = 0;  // KV blocks (all layers share block ids)
  int32_t block_size = 16;
  IsaLevel isa = IsaLevel::kScalar;
  // Tiled prompt attention in llama.cpp's exact order, or in bf16 (attention_tiled_bf16.hpp;
  // the caller checks bf16_attention_supported()).
  PrefillAttentionPrecision prefill_attention = PrefillAttentionPrecision::kExact;
  // The KV memory's format: fp16, or q8_0 (attention_q8.hpp: llama.cpp's flash-attention order
  // for every query row; needs head_dim % 32 == 0 and exact prefill attention).
  KvDtype kv_dtype = KvDtype::kF16;
  ForwardObserver observer;  // empty: nothing observes (the normal case)
};

class LlamaForward {
 public:
  // Repacks every weight (throws std::invalid_argument naming an unsupported tensor type) and
  // allocates the KV blocks.
  LlamaForward(model::LlamaWeights weights, const ForwardConfig& config);

  const model::LlamaConfig& config() const { return weights_.config(); }
  int32_t num_blocks() const { return config_.num_blocks; }
  const KvGroups& kv_groups() const { return kv_groups_; }
  int32_t block_size() const { return config_.block_size; }
  KvDtype kv_dtype() const { return config_.kv_dtype; }
  int64_t kv_bytes() const { return static_cast<int64_t>(kv_.size()) * 2; }
  static int64_t kv_bytes_per_block(const model::LlamaConfig& c, int32_t block_size,
                                    KvDtype dtype = KvDtype::kF16);
  int64_t packed_weight_bytes() const { return packed_bytes_; }
  // One layer's K and V pages (the backend exposes the memory for KV transfer). With KV
  // groups the layers of one slot share the pages: a page belongs to one group at a time.
  KvLayerView kv_layer(int32_t layer);
  // The pages of one layer slot (0..layers_per_group-1; the layer itself without groups).
  KvLayerView kv_slot(int32_t slot);

  // Throws std::invalid_argument when the batch is malformed (offsets, positions, block ids).
  void validate(const StepBatch& batch) const;

  // Runs the batch; returns logits [rows][n_vocab]: for each seq with sample = true, in
  // StepBatch::seqs order, 1 + num_draft_tokens rows (its last positions, in order).
  // The sampling rows' logits ([rows][n_vocab]), or nullptr when the batch's interrupt was
  // honoured (gpu::StepInterrupt: it is checked before each layer of the first half).
  const std::vector<float>* forward(const StepBatch& batch, ThreadPool& pool);
  // The last forward()'s wall time: its layers (with the embeddings) and its logits (the final
  // norm and the vocabulary projection), in milliseconds.
  double last_layers_ms() const { return last_layers_ms_; }
  double last_logits_ms() const { return last_logits_ms_; }

  // Prompt outputs (issue 37): after forward(), the final-norm hidden rows of every position a
  // slice asked scores or hidden rows for — per slice (StepBatch::seqs order) its positions
  // [first_position, first_position + num_rows), at row first_row of prompt_hidden(), each
  // n_embd floats. project_output() turns such rows into logits ([rows][n_vocab]) exactly as
  // the sampling rows' are computed.
  struct PromptRows {
    int32_t first_position = 0;
    int32_t num_rows = 0;
    int64_t first_row = 0;
  };
  const std::vector<PromptRows>& prompt_rows() const { return prompt_rows_; }
  const float* prompt_hidden() const { return prompt_hidden_.data(); }
  void project_output(const float* hidden, int64_t rows, float* logits, ThreadPool& pool);

  // Query heads [first_head, first_head + num_heads) of one KV head for the plan's
  // singles[single]: one attention_group call, which converts the KV head's K/V rows once for
  // all of them.
  struct HeadRun {
    int32_t single = 0;
    int32_t first_head = 0;
    int32_t num_heads = 0;
  };
  // The per-token items' head runs for `threads` threads (1: run serially). Whole GQA groups,
  // except the last (groups mod threads), which are cut into min(threads, group) runs, largest
  // first, for the threads to share: public for its test.
  static void plan_head_runs(int64_t num_singles, int32_t n_head_kv, int32_t group, int threads,
                             std::vector<HeadRun>& runs);

 private:
  // Weights that read the same input, packed as one matrix when they share a type (one pass over
  // the activations), else one part each; parts write consecutive column ranges of the output.
  struct Projection {
    std::vector<PackedMatrix> parts;
    std::vector<int64_t> column_offsets;
    int64_t num_outputs = 0;
    bool quantized = false;  // a part reads the per-32 int8 rows (Q4_0/Q4_1/Q5_x/Q8_0)
    bool q8k = false;        // a part reads Q8_K rows (K-quants)
  };
  struct Layer {
    Projection qkv;      // [q_dim + 2 kv_dim] outputs
    Projection wo;
    Projection gate_up;  // [2 n_ff] outputs: gate then up
    Projection down;
    const float* attn_norm = nullptr;
    const float* ffn_norm = nullptr;
    const float* bq = nullptr;
    const float* bk = nullptr;
    const float* bv = nullptr;
    // gemma3 (LlamaConfig::qk_norm, post_norms); nullptr otherwise.
    const float* q_norm = nullptr;
    const float* k_norm = nullptr;
    const float* post_attn_norm = nullptr;
    const float* post_ffn_norm = nullptr;
  };

  // Attention work for every KV head: a tile of consecutive chunk-order tokens of one sequence
  // (attention_tile), or one decode-order token (attention_group).
  struct AttentionWork {
    int32_t first_token = 0;
    int32_t num_tokens = 1;
    int32_t seq = 0;  // index into StepBatch::seqs
    bool tiled = false;
    int64_t cost = 0;  // query tokens x keys: is the step worth waking the pool?
  };
  // The planned work: tiles first, then the per-token items (collected in `singles` on the way),
  // each cut into head runs.
  struct AttentionPlan {
    std::vector<AttentionWork> work;
    std::vector<AttentionWork> singles;
    std::vector<HeadRun> head_runs;
    int64_t num_tiles = 0;
  };

  static void plan_attention(const StepBatch& batch, int32_t group, bool tiled,
                             AttentionPlan& plan);

  static Projection make_projection(const std::vector<const model::WeightView*>& views);
  Projection single(const model::WeightView& view);
  // orders: llama.cpp's K-quant order per row (token rows); nullptr (the logits rows, which
  // llama.cpp computes one per sequence): kVecDot.
  void project(const Projection& w, const float* x, int64_t ldx, int64_t rows, float* y,
               int64_t ldy, ThreadPool& pool, const Q8KOrder* orders = nullptr);
  // project() in three parts, for callers that quantize rows in a job of their own: size the
  // quantized input for `rows`, quantize rows [row_begin, row_end) (any thread, disjoint
  // ranges), then the products.
  void size_input(const Projection& w, int64_t rows);
  void quantize_input(const Projection& w, const float* x, int64_t ldx, int64_t row_begin,
                      int64_t row_end);
  void multiply(const Projection& w, const float* x, int64_t ldx, int64_t rows, float* y,
                int64_t ldy, ThreadPool& pool, const Q8KOrder* orders);
  void attention(const StepBatch& batch, int32_t layer, ThreadPool& pool);
  // The block table a layer of `s` reads: its KV group's row (freed pages resolved to the zero
  // page with groups).
  const int32_t* table_of(const StepBatch& batch, const SequenceSlice& s, int32_t layer) const;
  void resolve_tables(const StepBatch& batch);
  // Pages of memory: the pool's, plus the zero page when the model has KV groups.
  int32_t num_pages() const { return config_.num_blocks + (kv_groups_.num_groups > 1 ? 1 : 0); }
  // Q and K of one token row after the projection: bias, QK norm, RoPE with the layer's
  // tables, the query scale, Q rounded to fp16; then K and V stored in the token's KV slot.
  void prepare_qkv_row(const StepBatch& batch, int32_t layer, int64_t row);
  // attention()'s parts: the per-thread scratch made ready for this layer's K/V; one run of
  // query heads of a per-token item, and one tile of one KV head, on thread `t`.
  void reset_attention_scratch(size_t threads);
  void attend_head_run(const StepBatch& batch, const KvLayerView& kv, int32_t layer,
                       const HeadRun& run, int t);
  void attend_tile(const StepBatch& batch, const KvLayerView& kv, int32_t layer,
                   const AttentionWork& work, int32_t kv_head, int t);
  // Query heads [first_head, first_head + num_heads) of one KV head for every token of `work`,
  // over a q8_0 cache (attention_q8.hpp: the same order for prompt and generated tokens).
  void attend_q8(const StepBatch& batch, const KvLayerView& kv, int32_t layer,
                 const AttentionWork& work, int32_t first_head, int32_t num_heads, int t);

  // forward(), phase by phase (the CUDA backend's step_forward.cpp has the same shape).
  void prepare_scratch(const StepBatch& batch, ThreadPool& pool);
  void embed(const StepBatch& batch);
  // RMSNorm -> QKV -> RoPE -> KV store -> attention -> Wo (+ residual).
  void attention_block(const StepBatch& batch, int32_t layer, ThreadPool& pool);
  // RMSNorm -> gate|up -> SwiGLU -> down (+ residual).
  void feed_forward_block(int64_t num_tokens, int32_t layer, ThreadPool& pool);
  // The final norm and the vocabulary projection, for the sampling rows only; then the final
  // norm of the prompt-output rows (prompt_output_rows()).
  const std::vector<float>& logits(const StepBatch& batch, ThreadPool& pool);
  void prompt_output_rows(const StepBatch& batch);
  void validate_prompt_outputs(const StepBatch& batch, const SequenceSlice& slice,
                               const std::string& who) const;
  // Runs fn(i) for every token row, on the pool when there are enough rows.
  template <typename Fn>
  void for_each_row(int64_t num_rows, ThreadPool& pool, const Fn& fn);
  // Runs fn(begin, end) over the token rows in groups of kRmsNormRows (the last may be short),
  // each group on one thread (rmsnorm_rows), on the pool when there are enough rows.
  template <typename Fn>
  void for_row_groups(int64_t num_rows, ThreadPool& pool, const Fn& fn);
  void observe(const char* name, int32_t layer, const float* data, int64_t rows, int64_t cols,
               int64_t ld) const {
    if (config_.observer) config_.observer(name, layer, data, rows, cols, ld);
  }

  model::LlamaWeights weights_;
  ForwardConfig config_;
  Bf16Kernels bf16_kernels_;  // the best this CPU runs, when prefill_attention is bf16
  KvGroups kv_groups_;
  std::vector<Layer> layers_;
  Projection output_;
  int64_t packed_bytes_ = 0;
  // [layer slot][K|V][pages][n_kv][block_size][KvLayerView::row_words()]
  std::vector<uint16_t> kv_;

  // Scratch, grown to the largest step seen.
  std::vector<float> x_, h_, qkv_, attn_, gu_, act_, tmp_, logits_, rope_cos_, rope_sin_;
  // The sliding-window layers' RoPE tables (their own base), when the model has such layers.
  std::vector<float> rope_cos_sliding_, rope_sin_sliding_;
  std::vector<PromptRows> prompt_rows_;  // per slice of the last forward()
  double last_layers_ms_ = 0;
  double last_logits_ms_ = 0;
  std::vector<float> prompt_hidden_;
  std::vector<int32_t> token_seq_;  // seq index of each token
  std::vector<int32_t> tables_;     // the step's block tables, freed pages -> the zero page
  std::vector<Q8KOrder> q8k_orders_;  // llama.cpp's K-quant order of each token (forward.cpp)
  QuantizedRows q_;
  std::vector<std::vector<float>> attn_scratch_;  // per thread
  std::vector<AttentionTileScratch> tile_scratch_;  // per thread
  std::vector<ConvertedHead> converted_;            // per thread; reset every layer
  std::vector<AttentionTileBf16Scratch> bf16_scratch_;  // per thread (prefill_attention bf16)
  std::vector<ConvertedHeadBf16> converted_bf16_;       // per thread; reset every layer
  std::vector<Q8AttentionScratch> q8_scratch_;          // per thread (kv_dtype q8_0)
  AttentionPlan attn_plan_;                         // this layer's, rebuilt in place
};

}  // namespace troupe::gpu::cpu
