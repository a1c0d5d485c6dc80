// The forward pass of one step, enqueued on the backend's stream (see step_forward.hpp).
#include "gpu/cuda/step_forward.hpp"

#include <cstddef>
#include <cstring>
#include <vector>

#include "gpu/cuda/attention.cuh"
#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/embedding.cuh"
#include "gpu/cuda/geglu_mul.cuh"
#include "gpu/cuda/gemm.hpp"
#include "gpu/cuda/head_rmsnorm.cuh"
#include "gpu/cuda/kv_write.cuh"
#include "gpu/cuda/rmsnorm.cuh"
#include "gpu/cuda/rope.cuh"
#include "gpu/cuda/silu_mul.cuh"
#include "model/fp16.hpp"

namespace troupe::gpu::cuda {
namespace {

// Shows one intermediate to the parity observer, if there is one: waits for the stream, copies
// the rows to the host and widens fp16/bf16 activations to float. Never on the serving path.
void observe(const ForwardContext& ctx, const char* name, int32_t layer, const void* device,
             bool is_f32, int64_t rows, int64_t cols, int64_t ld) {
  if (ctx.observer == nullptr || !*ctx.observer || rows == 0) return;
  const size_t element = is_f32 ? 4 : 2;
  std::vector<std::byte> raw(static_cast<size_t>(rows * ld) * element);
  CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  CUDA_CHECK(cudaMemcpy(raw.data(), device, raw.size(), cudaMemcpyDeviceToHost));
  std::vector<float> values(static_cast<size_t>(rows * ld));
  for (size_t i = 0; i < values.size(); ++i) {
    if (is_f32) {
      std::memcpy(&values[i], raw.data() + 4 * i, 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, raw.data() + 2 * i, 2);
      values[i] = ctx.act == ActType::kF16 ? model::fp16_to_fp32(bits) : model::bf16_to_fp32(bits);
    }
  }
  (*ctx.observer)(name, layer, values.data(), rows, cols, ld);
}

// RMSNorm of `num_rows` rows of the residual stream into the normed activations.
RmsNormArgs norm_args(const ForwardContext& ctx, int32_t num_rows, const float* weight) {
  const model::LlamaConfig& c = *ctx.model;
  const int64_t E = c.n_embd;
  RmsNormArgs norm;
  norm.x = ctx.scratch->x;
  norm.ld_x = E;
  norm.num_rows = num_rows;
  norm.weight = weight;
  norm.n = c.n_embd;
  norm.eps = c.rms_eps;
  norm.out_act = ctx.scratch->h;
  norm.act_type = ctx.act;
  norm.ld_out = E;
  return norm;
}

// A projection's output joins the residual stream: added by the GEMM itself, or (gemma3's post
// norms) written to scratch->tmp, normed with `post_norm` and added there, as the CPU twin's
// `rmsnorm(t); x[j] += t[j]`. The GEMM is the caller's, with its output left to this.
void project_into_residual(const ForwardContext& ctx, GemmArgs gemm, const float* post_norm,
                           int32_t T, const char* name, int32_t l) {
  const model::LlamaConfig& c = *ctx.model;
  const ForwardScratch& s = *ctx.scratch;
  const int64_t E = c.n_embd;
  if (post_norm == nullptr) {
    gemm.output = s.x;
    gemm.add_to_output = true;
    gemm_rows(ctx.cublas, gemm);
    return;
  }
  gemm.output = s.tmp;
  gemm.add_to_output = false;
  gemm_rows(ctx.cublas, gemm);
  observe(ctx, name, l, s.tmp, true, T, E, E);
  RmsNormArgs norm;
  norm.x = s.tmp;
  norm.ld_x = E;
  norm.num_rows = T;
  norm.weight = post_norm;
  norm.n = c.n_embd;
  norm.eps = c.rms_eps;
  norm.out_f32 = s.x;
  norm.add_to_out = true;
  norm.ld_out = E;
  rmsnorm_rows(norm, ctx.stream);
}

// RMSNorm -> QKV GEMM -> [per-head Q/K norm] -> RoPE -> paged KV write -> paged attention ->
// output GEMM (+residual, or its post norm first).
void enqueue_attention_block(const ForwardContext& ctx, int32_t l, const DeviceStepInputs& in,
                             int32_t T, int32_t max_blocks_per_seq) {
  const model::LlamaConfig& c = *ctx.model;
  const ForwardScratch& s = *ctx.scratch;
  const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), W = Q + 2 * KV;
  const DeviceLayerWeights& L = ctx.weights->layers[l];
  const LayerKvCache& K = ctx.kv_cache->layers[l];
  // The layer's KV group: its sequences' block tables and its tokens' cache slots.
  const int32_t group = ctx.kv_groups->group_of[static_cast<size_t>(l)];
  const int32_t* slots = in.slots + group * in.slots_group_stride;
  const int32_t* block_tables = in.block_tables + group * in.tables_group_stride;
  const bool sliding = c.is_sliding(l);
  rmsnorm_rows(norm_args(ctx, T, L.attn_norm), ctx.stream);
  observe(ctx, "attn_norm", l, s.h, false, T, E, E);
  gemm_rows(ctx.cublas, GemmArgs{.activation_type = ctx.act, .weight = L.qkv, .input = s.h,
                                 .input_stride = E, .output = s.qkv, .output_stride = W,
                                 .num_rows = T, .input_dim = c.n_embd,
                                 .output_dim = static_cast<int32_t>(W)});
  observe(ctx, "qkv", l, s.qkv, true, T, W, W);
  if (L.q_norm != nullptr) {
    head_rmsnorm_inplace(HeadRmsNormArgs{.qkv = s.qkv, .ld = W, .num_tokens = T,
                                         .n_head = c.n_head, .n_head_kv = c.n_head_kv,
                                         .head_dim = c.head_dim, .q_weight = L.q_norm,
                                         .k_weight = L.k_norm, .eps = c.rms_eps},
                         ctx.stream);
  }

  // Queries meet fp16 keys as fp16, as on the CPU (round_q_to_f16); gemma3 scales them first.
  // The sliding layers have their own base and scale and no rope_freqs factors, as on the CPU.
  rope_inplace(RopeArgs{.qkv = s.qkv, .ld = W, .positions = in.positions, .num_tokens = T,
                        .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim,
                        .n_rot = c.n_rot, .freq_base = c.rope_base(l),
                        .freq_scale = c.rope_scale(l),
                        .freq_factors = sliding ? nullptr : ctx.weights->rope_freqs,
                        .neox = c.rope_mode == model::RopeMode::kNeox,
                        .q_scale = c.scale_queries ? c.query_scale() : 1.0f,
                        .round_q_to_f16 = true},
               ctx.stream);
  observe(ctx, "qk_rope", l, s.qkv, true, T, Q + KV, W);
  kv_write(KvWriteArgs{.qkv = s.qkv, .ld = W, .k_column = Q, .v_column = Q + KV,
                       .slot_mapping = slots, .num_tokens = T, .n_head_kv = c.n_head_kv,
                       .head_dim = c.head_dim, .block_size = ctx.block_size,
                       .k_cache = K.k_cache, .v_cache = K.v_cache,
                       .element = ctx.kv_cache->element, .k_scale = ctx.kv_cache->k_scale,
                       .v_scale = ctx.kv_cache->v_scale},
           ctx.stream);
  paged_attention(AttentionArgs{.q = s.qkv, .ld_q = W, .k_cache = K.k_cache, .v_cache = K.v_cache,
                                .element = ctx.kv_cache->element,
                                .k_scale = ctx.kv_cache->k_scale,
                                .v_scale = ctx.kv_cache->v_scale, .positions = in.positions, .token_table_row = in.table_rows,
                                .block_tables = block_tables,
                                .max_blocks_per_seq = max_blocks_per_seq, .num_tokens = T,
                                .n_head = c.n_head, .n_head_kv = c.n_head_kv,
                                .head_dim = c.head_dim, .block_size = ctx.block_size,
                                .scale = c.attention_scale(),
                                .sliding_window = sliding ? c.sliding_window : 0,
                                .out = s.attn, .ld_out = Q, .out_type = ctx.act},
                  ctx.stream);
  observe(ctx, "kqv_out", l, s.attn, false, T, Q, Q);
  project_into_residual(ctx,
                        GemmArgs{.activation_type = ctx.act, .weight = L.wo, .input = s.attn,
                                 .input_stride = Q, .output_stride = E, .num_rows = T,
                                 .input_dim = static_cast<int32_t>(Q), .output_dim = c.n_embd},
                        L.post_attn_norm, T, "attn_out", l);
  observe(ctx, "ffn_inp", l, s.x, true, T, E, E);
}

// RMSNorm -> gate|up GEMM -> SiLU*up (GELU*up: gemma3) -> down GEMM (+residual, or its post
// norm first).
void enqueue_feed_forward_block(const ForwardContext& ctx, int32_t l, int32_t T) {
  const model::LlamaConfig& c = *ctx.model;
  const ForwardScratch& s = *ctx.scratch;
  const int64_t E = c.n_embd, F = c.n_ff;
  const DeviceLayerWeights& L = ctx.weights->layers[l];
  rmsnorm_rows(norm_args(ctx, T, L.ffn_norm), ctx.stream);
  observe(ctx, "ffn_norm", l, s.h, false, T, E, E);
  gemm_rows(ctx.cublas, GemmArgs{.activation_type = ctx.act, .weight = L.gate_up, .input = s.h,
                                 .input_stride = E, .output = s.gate_up, .output_stride = 2 * F,
                                 .num_rows = T, .input_dim = c.n_embd,
                                 .output_dim = static_cast<int32_t>(2 * F)});
  observe(ctx, "gate_up", l, s.gate_up, true, T, 2 * F, 2 * F);
  if (c.ffn_activation == model::FfnActivation::kGeluTanh) {
    geglu_mul(s.gate_up, T, c.n_ff, ctx.weights->gelu_table, s.ff, ctx.act, /*out_f32=*/false,
              ctx.stream);
  } else {
    silu_mul(s.gate_up, T, c.n_ff, s.ff, ctx.act, /*out_f32=*/false, ctx.stream);
  }
  observe(ctx, "ffn_swiglu", l, s.ff, false, T, F, F);
  project_into_residual(ctx,
                        GemmArgs{.activation_type = ctx.act, .weight = L.down, .input = s.ff,
                                 .input_stride = F, .output_stride = E, .num_rows = T,
                                 .input_dim = c.n_ff, .output_dim = c.n_embd},
                        L.post_ffn_norm, T, "ffn_out", l);
  observe(ctx, "l_out", l, s.x, true, T, E, E);
}

}  // namespace

void enqueue_forward_pass(const ForwardContext& ctx, const DeviceStepInputs& in,
                          int32_t num_tokens, int32_t num_rows, int32_t max_blocks_per_seq) {
  const model::LlamaConfig& c = *ctx.model;
  const DeviceWeights& w = *ctx.weights;
  const int32_t T = num_tokens, S = num_rows;
  const int64_t E = c.n_embd;
  embedding_gather(w.embd_raw, w.embd_type, w.embd_row_bytes, c.n_embd, in.token_ids, T,
                   ctx.scratch->x, ctx.stream, c.embedding_scale);
  observe(ctx, "inp_embd", 0, ctx.scratch->x, true, T, E, E);
  for (int32_t l = 0; l < c.n_layer; ++l) {
    enqueue_attention_block(ctx, l, in, T, max_blocks_per_seq);
    enqueue_feed_forward_block(ctx, l, T);
  }
  if (S > 0) {
    RmsNormArgs norm = norm_args(ctx, S, w.output_norm);
    norm.row_index = in.sample_rows;
    rmsnorm_rows(norm, ctx.stream);
    observe(ctx, "result_norm", -1, ctx.scratch->h, false, S, E, E);
    gemm_rows(ctx.cublas, GemmArgs{.activation_type = ctx.act, .weight = w.output,
                                   .input = ctx.scratch->h, .input_stride = E,
                                   .output = ctx.scratch->logits, .output_stride = c.n_vocab,
                                   .num_rows = S, .input_dim = c.n_embd,
                                   .output_dim = c.n_vocab});
  }
}

}  // namespace troupe::gpu::cuda
