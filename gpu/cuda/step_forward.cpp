// The forward pass of one step, enqueued on the backend's stream (see step_forward.hpp).
#include "gpu/cuda/step_forward.hpp"

#include "gpu/cuda/attention.cuh"
#include "gpu/cuda/embedding.cuh"
#include "gpu/cuda/gemm.hpp"
#include "gpu/cuda/kv_write.cuh"
#include "gpu/cuda/rmsnorm.cuh"
#include "gpu/cuda/rope.cuh"
#include "gpu/cuda/silu_mul.cuh"

namespace troupe::gpu::cuda {
namespace {

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

// RMSNorm -> QKV GEMM -> RoPE -> paged KV write -> paged attention -> output GEMM (+residual).
void enqueue_attention_block(const ForwardContext& ctx, int32_t l, const DeviceStepInputs& in,
                             int32_t T, int32_t max_blocks_per_seq) {
  const model::LlamaConfig& c = *ctx.model;
  const ForwardScratch& s = *ctx.scratch;
  const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), W = Q + 2 * KV;
  const DeviceLayerWeights& L = ctx.weights->layers[l];
  const LayerKvCache& K = ctx.kv_cache->layers[l];
  rmsnorm_rows(norm_args(ctx, T, L.attn_norm), ctx.stream);
  gemm_rows(ctx.cublas, GemmArgs{.activation_type = ctx.act, .weight = L.qkv, .input = s.h,
                                 .input_stride = E, .output = s.qkv, .output_stride = W,
                                 .num_rows = T, .input_dim = c.n_embd,
                                 .output_dim = static_cast<int32_t>(W)});

  RopeArgs rope;
  rope.qkv = s.qkv;
  rope.ld = W;
  rope.positions = in.positions;
  rope.num_tokens = T;
  rope.n_head = c.n_head;
  rope.n_head_kv = c.n_head_kv;
  rope.head_dim = c.head_dim;
  rope.n_rot = c.n_rot;
  rope.freq_base = c.rope_freq_base;
  rope.freq_scale = c.rope_freq_scale;
  rope.freq_factors = ctx.weights->rope_freqs;
  rope.neox = c.rope_mode == model::RopeMode::kNeox;
  rope.round_q_to_f16 = true;  // queries meet fp16 keys as fp16, as on the CPU
  rope_inplace(rope, ctx.stream);

  KvWriteArgs kvw;
  kvw.qkv = s.qkv;
  kvw.ld = W;
  kvw.k_column = Q;
  kvw.v_column = Q + KV;
  kvw.slot_mapping = in.slots;
  kvw.num_tokens = T;
  kvw.n_head_kv = c.n_head_kv;
  kvw.head_dim = c.head_dim;
  kvw.block_size = ctx.block_size;
  kvw.k_cache = K.k_cache;
  kvw.v_cache = K.v_cache;
  kv_write(kvw, ctx.stream);

  AttentionArgs at;
  at.q = s.qkv;
  at.ld_q = W;
  at.k_cache = K.k_cache;
  at.v_cache = K.v_cache;
  at.positions = in.positions;
  at.token_table_row = in.table_rows;
  at.block_tables = in.block_tables;
  at.max_blocks_per_seq = max_blocks_per_seq;
  at.num_tokens = T;
  at.n_head = c.n_head;
  at.n_head_kv = c.n_head_kv;
  at.head_dim = c.head_dim;
  at.block_size = ctx.block_size;
  at.scale = c.attention_scale();
  at.out = s.attn;
  at.ld_out = Q;
  at.out_type = ctx.act;
  paged_attention(at, ctx.stream);
  gemm_rows(ctx.cublas, GemmArgs{.activation_type = ctx.act, .weight = L.wo, .input = s.attn,
                                 .input_stride = Q, .output = s.x, .output_stride = E,
                                 .num_rows = T, .input_dim = static_cast<int32_t>(Q),
                                 .output_dim = c.n_embd, .add_to_output = true});
}

// RMSNorm -> gate|up GEMM -> SiLU*up -> down GEMM (+residual).
void enqueue_feed_forward_block(const ForwardContext& ctx, int32_t l, int32_t T) {
  const model::LlamaConfig& c = *ctx.model;
  const ForwardScratch& s = *ctx.scratch;
  const int64_t E = c.n_embd, F = c.n_ff;
  const DeviceLayerWeights& L = ctx.weights->layers[l];
  rmsnorm_rows(norm_args(ctx, T, L.ffn_norm), ctx.stream);
  gemm_rows(ctx.cublas, GemmArgs{.activation_type = ctx.act, .weight = L.gate_up, .input = s.h,
                                 .input_stride = E, .output = s.gate_up, .output_stride = 2 * F,
                                 .num_rows = T, .input_dim = c.n_embd,
                                 .output_dim = static_cast<int32_t>(2 * F)});
  silu_mul(s.gate_up, T, c.n_ff, s.ff, ctx.act, /*out_f32=*/false, ctx.stream);
  gemm_rows(ctx.cublas, GemmArgs{.activation_type = ctx.act, .weight = L.down, .input = s.ff,
                                 .input_stride = F, .output = s.x, .output_stride = E,
                                 .num_rows = T, .input_dim = c.n_ff, .output_dim = c.n_embd,
                                 .add_to_output = true});
}

}  // namespace

void enqueue_forward_pass(const ForwardContext& ctx, const DeviceStepInputs& in,
                          int32_t num_tokens, int32_t num_rows, int32_t max_blocks_per_seq) {
  const model::LlamaConfig& c = *ctx.model;
  const DeviceWeights& w = *ctx.weights;
  const int32_t T = num_tokens, S = num_rows;
  const int64_t E = c.n_embd;
  embedding_gather(w.embd_raw, w.embd_type, w.embd_row_bytes, c.n_embd, in.token_ids, T, ctx.scratch->x, ctx.stream);
  for (int32_t l = 0; l < c.n_layer; ++l) {
    enqueue_attention_block(ctx, l, in, T, max_blocks_per_seq);
    enqueue_feed_forward_block(ctx, l, T);
  }
  if (S > 0) {
    RmsNormArgs norm = norm_args(ctx, S, w.output_norm);
    norm.row_index = in.sample_rows;
    rmsnorm_rows(norm, ctx.stream);
    gemm_rows(ctx.cublas, GemmArgs{.activation_type = ctx.act, .weight = w.output,
                                   .input = ctx.scratch->h, .input_stride = E,
                                   .output = ctx.scratch->logits, .output_stride = c.n_vocab,
                                   .num_rows = S, .input_dim = c.n_embd,
                                   .output_dim = c.n_vocab});
  }
}

}  // namespace troupe::gpu::cuda
