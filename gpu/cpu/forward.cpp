// The llama forward pass over paged KV (see forward.hpp).
#include "gpu/cpu/forward.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

#include "model/fp16.hpp"
#include "gpu/cpu/geglu.hpp"
#include "gpu/cpu/hadamard.hpp"
#include "gpu/cpu/rmsnorm.hpp"
#include "gpu/cpu/rope.hpp"
#include "gpu/cpu/swiglu.hpp"
#include "gpu/cpu/vec_math.hpp"
#include "gpu/kv_groups.hpp"

namespace troupe::gpu::cpu {
namespace {

// Rows per parallel chunk for row-local elementwise work; below this one thread does it all.
constexpr int64_t kParallelRows = 8;


// llama.cpp's K-quant product order for the token at `position` (matmul_q8k.hpp): it runs a
// prompt in ubatches of at most 512 tokens (its default n_ubatch) and takes the tiled kernel
// for a ubatch of 8 rows or more; a generated token is decoded alone. Keyed, like
// uses_decode_order (forward_attention.cpp), on what the token is, so chunking and batching do not change a sequence's
// logits.
constexpr int32_t kLlamaCppUbatch = 512;
constexpr int32_t kLlamaCppTiledMinRows = 8;

Q8KOrder kquant_order(const SequenceSlice& s, int32_t position) {
  if (s.num_prompt_tokens < 0) {
    return s.num_tokens >= kLlamaCppTiledMinRows ? Q8KOrder::kTiled : Q8KOrder::kVecDot;
  }
  if (position >= s.num_prompt_tokens) return Q8KOrder::kVecDot;
  const int32_t ubatch_start = position / kLlamaCppUbatch * kLlamaCppUbatch;
  const int32_t ubatch_rows = std::min(kLlamaCppUbatch, s.num_prompt_tokens - ubatch_start);
  return ubatch_rows >= kLlamaCppTiledMinRows ? Q8KOrder::kTiled : Q8KOrder::kVecDot;
}

}  // namespace

LlamaForward::Projection LlamaForward::make_projection(
    const std::vector<const model::WeightView*>& views) {
  Projection p;
  bool same_type = true;
  for (const auto* v : views) {
    same_type = same_type && v->type == views[0]->type;
    if (!is_supported_weight_type(v->type)) {
      throw std::invalid_argument("tensor " + v->name + ": type " +
                                  std::string(model::tensor_type_name(v->type)) +
                                  " is not supported by the CPU backend yet");
    }
  }
  if (same_type && views.size() > 1) {
    std::vector<std::byte> concat;
    int64_t rows = 0;
    for (const auto* v : views) {
      const size_t bytes = model::row_bytes(v->type, v->num_inputs) * v->num_outputs;
      concat.insert(concat.end(), v->data, v->data + bytes);
      rows += v->num_outputs;
    }
    p.parts.push_back(PackedMatrix::pack(views[0]->type, concat.data(), rows, views[0]->num_inputs));
    p.column_offsets.push_back(0);
    p.num_outputs = rows;
  } else {
    for (const auto* v : views) {
      p.parts.push_back(PackedMatrix::pack(v->type, v->data, v->num_outputs, v->num_inputs));
      p.column_offsets.push_back(p.num_outputs);
      p.num_outputs += v->num_outputs;
    }
  }
  for (const PackedMatrix& m : p.parts) {
    p.quantized = p.quantized || (m.quantized() && !m.q8k());
    p.q8k = p.q8k || m.q8k();
  }
  return p;
}

LlamaForward::Projection LlamaForward::single(const model::WeightView& view) {
  return make_projection({&view});
}

int64_t LlamaForward::kv_bytes_per_block(const model::LlamaConfig& c, int32_t block_size,
                                         KvDtype dtype) {
  return static_cast<int64_t>(KvGroups::of(c).layers_per_group) * 2 * c.n_head_kv * block_size *
         kv_row_bytes(dtype, c.head_dim);
}

LlamaForward::LlamaForward(model::LlamaWeights weights, const ForwardConfig& config)
    : weights_(std::move(weights)),
      config_(config),
      bf16_kernels_(config.prefill_attention == PrefillAttentionPrecision::kBf16
                        ? best_bf16_kernels()
                        : Bf16Kernels::kScalar),
      kv_groups_(KvGroups::of(weights_.config())) {
  const model::LlamaConfig& c = weights_.config();
  if (config_.num_blocks <= 0 || config_.block_size <= 0) {
    throw std::invalid_argument("CPU backend: num_blocks and block_size must be positive");
  }
  if (c.rope_mode == model::RopeMode::kNeox && c.n_rot % 2 != 0) {
    throw std::invalid_argument("CPU backend: NEOX RoPE needs an even n_rot");
  }
  if (config_.kv_dtype != KvDtype::kF16 && config_.kv_dtype != KvDtype::kQ8_0) {
    throw std::invalid_argument(std::string("CPU backend: cache.kv_dtype \"") +
                                std::string(kKvDtypeNames.name(config_.kv_dtype)) +
                                "\" is for the CUDA backend; the CPU backend takes f16 or q8_0");
  }
  if (!kv_dtype_fits(config_.kv_dtype, c.head_dim)) {
    throw std::invalid_argument("CPU backend: cache.kv_dtype \"q8_0\" needs head_dim % 32 == 0 (this "
                                "model's is " + std::to_string(c.head_dim) + ")");
  }
  if (config_.kv_dtype == KvDtype::kQ8_0 &&
      config_.prefill_attention == PrefillAttentionPrecision::kBf16) {
    throw std::invalid_argument(
        "CPU backend: cpu.prefill_attention \"bf16\" reads fp16 KV; with cache.kv_dtype \"q8_0\" "
        "use \"exact\"");
  }
  for (const model::LlamaLayerWeights& l : weights_.layers()) {
    Layer L;
    L.qkv = make_projection({&l.wq, &l.wk, &l.wv});
    L.wo = single(l.wo);
    L.gate_up = make_projection({&l.w_gate, &l.w_up});
    L.down = single(l.w_down);
    L.attn_norm = l.attn_norm.as_f32();
    L.ffn_norm = l.ffn_norm.as_f32();
    if (l.bq) L.bq = l.bq->as_f32();
    if (l.bk) L.bk = l.bk->as_f32();
    if (l.bv) L.bv = l.bv->as_f32();
    if (l.q_norm) L.q_norm = l.q_norm->as_f32();
    if (l.k_norm) L.k_norm = l.k_norm->as_f32();
    if (l.post_attn_norm) L.post_attn_norm = l.post_attn_norm->as_f32();
    if (l.post_ffn_norm) L.post_ffn_norm = l.post_ffn_norm->as_f32();
    for (const Projection* p : {&L.qkv, &L.wo, &L.gate_up, &L.down}) {
      for (const PackedMatrix& m : p->parts) packed_bytes_ += static_cast<int64_t>(m.bytes());
    }
    layers_.push_back(std::move(L));
  }
  output_ = single(weights_.output());
  for (const PackedMatrix& m : output_.parts) packed_bytes_ += static_cast<int64_t>(m.bytes());
  // With KV groups, one page more than the pool hands out: all zeros, never written, read in
  // place of the freed pages below a sliding window (resolve_tables).
  const size_t per_layer_side = static_cast<size_t>(num_pages()) * c.n_head_kv *
                                config_.block_size *
                                static_cast<size_t>(kv_row_bytes(config_.kv_dtype, c.head_dim) / 2);
  kv_.assign(per_layer_side * 2 * kv_groups_.layers_per_group, 0);
}

KvLayerView LlamaForward::kv_layer(int32_t layer) {
  return kv_slot(kv_groups_.slot_of[static_cast<size_t>(layer)]);
}

KvLayerView LlamaForward::kv_slot(int32_t slot) {
  const model::LlamaConfig& c = weights_.config();
  KvLayerView v;
  v.num_blocks = num_pages();
  v.block_size = config_.block_size;
  v.num_kv_heads = c.n_head_kv;
  v.head_dim = c.head_dim;
  v.dtype = config_.kv_dtype;
  const size_t side = v.block_elements() * v.num_blocks;
  v.k = kv_.data() + side * 2 * static_cast<size_t>(slot);
  v.v = v.k + side;
  return v;
}

const int32_t* LlamaForward::table_of(const StepBatch& b, const SequenceSlice& s,
                                      int32_t layer) const {
  const size_t group = static_cast<size_t>(kv_groups_.group_of[static_cast<size_t>(layer)]);
  const size_t row = group * b.seqs.size() + static_cast<size_t>(s.block_table_row);
  const std::vector<int32_t>& tables = kv_groups_.num_groups > 1 ? tables_ : b.block_tables;
  return tables.data() + row * static_cast<size_t>(b.max_blocks_per_seq);
}

void LlamaForward::resolve_tables(const StepBatch& b) {
  if (kv_groups_.num_groups == 1) return;
  tables_ = b.block_tables;
  for (int32_t& page : tables_) page = page < 0 ? config_.num_blocks : page;
}

void LlamaForward::size_input(const Projection& w, int64_t rows) {
  if (w.quantized || w.q8k) resize_quantized_rows(q_, rows, w.parts[0].num_inputs(), w.q8k);
}

void LlamaForward::quantize_input(const Projection& w, const float* x, int64_t ldx,
                                  int64_t row_begin, int64_t row_end) {
  // Only the activation rows some part reads: a K-quant-only projection (Gemma's attn_output,
  // ffn_down) skips the per-32 ones.
  if (w.quantized) quantize_row_range(x, ldx, row_begin, row_end, q_, config_.isa);
  if (w.q8k) quantize_q8k_range(x, ldx, row_begin, row_end, q_);
}

void LlamaForward::multiply(const Projection& w, const float* x, int64_t ldx, int64_t rows,
                            float* y, int64_t ldy, ThreadPool& pool, const Q8KOrder* orders) {
  const MatmulInput in{x, ldx, rows, &q_, orders};
  for (size_t i = 0; i < w.parts.size(); ++i) {
    matmul(w.parts[i], in, y + w.column_offsets[i], ldy, &pool, config_.isa);
  }
}

void LlamaForward::project(const Projection& w, const float* x, int64_t ldx, int64_t rows,
                           float* y, int64_t ldy, ThreadPool& pool, const Q8KOrder* orders) {
  size_input(w, rows);
  if (w.quantized || w.q8k) {
    if (rows >= kParallelRows) {
      pool.parallel_for(rows, [&](int64_t b, int64_t e, int) { quantize_input(w, x, ldx, b, e); });
    } else {
      quantize_input(w, x, ldx, 0, rows);
    }
  }
  multiply(w, x, ldx, rows, y, ldy, pool, orders);
}

template <typename Fn>
void LlamaForward::for_each_row(int64_t num_rows, ThreadPool& pool, const Fn& fn) {
  if (num_rows >= kParallelRows) {
    pool.parallel_for(num_rows, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) fn(i);
    });
  } else {
    for (int64_t i = 0; i < num_rows; ++i) fn(i);
  }
}

template <typename Fn>
void LlamaForward::for_row_groups(int64_t num_rows, ThreadPool& pool, const Fn& fn) {
  if (num_rows < kParallelRows) {
    fn(int64_t{0}, num_rows);
    return;
  }
  const int64_t groups = (num_rows + kRmsNormRows - 1) / kRmsNormRows;
  pool.parallel_for(groups, [&](int64_t begin, int64_t end, int) {
    fn(begin * kRmsNormRows, std::min(num_rows, end * kRmsNormRows));
  });
}

void LlamaForward::prepare_scratch(const StepBatch& b, ThreadPool& pool) {
  const model::LlamaConfig& c = weights_.config();
  const int64_t T = b.num_tokens();
  const int64_t E = c.n_embd, F = c.n_ff, Q = c.q_dim(), W = Q + 2 * c.kv_dim();
  const int32_t half_rot = c.n_rot / 2;
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  };
  grow(x_, T * E);
  grow(h_, T * E);
  grow(qkv_, T * W);
  grow(attn_, T * Q);
  grow(gu_, T * 2 * F);
  grow(act_, T * F);
  grow(tmp_, T * E);
  grow(rope_cos_, T * half_rot);
  grow(rope_sin_, T * half_rot);
  if (c.sliding_window > 0) {
    grow(rope_cos_sliding_, T * half_rot);
    grow(rope_sin_sliding_, T * half_rot);
  }
  token_seq_.assign(T, 0);
  q8k_orders_.assign(T, Q8KOrder::kVecDot);
  int32_t max_keys = 1;
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    for (int32_t i = 0; i < b.seqs[s].num_tokens; ++i) {
      const int32_t token = b.seqs[s].token_offset + i;
      token_seq_[token] = static_cast<int32_t>(s);
      q8k_orders_[token] = kquant_order(b.seqs[s], b.positions[token]);
    }
    max_keys = std::max(max_keys, b.seqs[s].context_len);
  }
  attn_scratch_.resize(pool.num_threads());
  for (auto& s : attn_scratch_) grow(s, static_cast<int64_t>(c.n_head / c.n_head_kv) * max_keys);
}

// Embeddings and this step's RoPE tables.
void LlamaForward::embed(const StepBatch& b) {
  const model::LlamaConfig& c = weights_.config();
  const int64_t E = c.n_embd;
  const int32_t half_rot = c.n_rot / 2;
  const model::WeightView& emb = weights_.token_embd();
  RopeParams rope{c.n_rot, c.rope_freq_base, c.rope_freq_scale};
  if (const auto f = weights_.rope_freq_factors(); !f.empty()) rope.freq_factors = f.data();
  // The sliding layers' table (their own base and scale: LlamaConfig::rope_base), when any.
  int32_t sliding_layer = 0;
  while (sliding_layer < c.n_layer && !c.is_sliding(sliding_layer)) ++sliding_layer;
  const RopeParams sliding{c.n_rot, c.rope_base(sliding_layer), c.rope_scale(sliding_layer)};
  for (int64_t i = 0; i < b.num_tokens(); ++i) {
    float* x = x_.data() + i * E;
    dequantize_row(emb.type, emb.row(b.token_ids[i]), E, x);
    // ggml_scale in f32 (gemma3: sqrt(n_embd)); 1 for the llama family, skipped.
    if (c.embedding_scale != 1.0f) {
      for (int64_t j = 0; j < E; ++j) x[j] *= c.embedding_scale;
    }
    rope_table(b.positions[i], rope, rope_cos_.data() + i * half_rot, rope_sin_.data() + i * half_rot);
    if (c.sliding_window > 0) {
      rope_table(b.positions[i], sliding, rope_cos_sliding_.data() + i * half_rot,
                 rope_sin_sliding_.data() + i * half_rot);
    }
  }
  observe("inp_embd", 0, x_.data(), b.num_tokens(), E, E);
}

void LlamaForward::prepare_qkv_row(const StepBatch& b, int32_t l, int64_t i) {
  const model::LlamaConfig& c = weights_.config();
  const int64_t Q = c.q_dim(), KV = c.kv_dim(), W = Q + 2 * KV;
  const int32_t half_rot = c.n_rot / 2;
  const IsaLevel isa = config_.isa;
  const Layer& L = layers_[l];
  float* q = qkv_.data() + i * W;
  float* k = q + Q;
  float* v = k + KV;
  if (L.bq) {
    for (int64_t j = 0; j < Q; ++j) q[j] += L.bq[j];
    for (int64_t j = 0; j < KV; ++j) k[j] += L.bk[j], v[j] += L.bv[j];
  }
  if (L.q_norm) {  // ggml_rms_norm over each head's head_dim values, then the weight
    for (int32_t h = 0; h < c.n_head; ++h) {
      float* qh = q + static_cast<int64_t>(h) * c.head_dim;
      rmsnorm(qh, L.q_norm, qh, c.head_dim, c.rms_eps, isa);
    }
    for (int32_t h = 0; h < c.n_head_kv; ++h) {
      float* kh = k + static_cast<int64_t>(h) * c.head_dim;
      rmsnorm(kh, L.k_norm, kh, c.head_dim, c.rms_eps, isa);
    }
  }
  const bool sliding = c.is_sliding(l);
  const float* cs = (sliding ? rope_cos_sliding_ : rope_cos_).data() + i * half_rot;
  const float* sn = (sliding ? rope_sin_sliding_ : rope_sin_).data() + i * half_rot;
  if (c.rope_mode == model::RopeMode::kNorm) {
    rope_apply(q, c.n_head, c.head_dim, c.n_rot, cs, sn, isa);
    rope_apply(k, c.n_head_kv, c.head_dim, c.n_rot, cs, sn, isa);
  } else {
    rope_apply_neox(q, c.n_head, c.head_dim, c.n_rot, cs, sn, isa);
    rope_apply_neox(k, c.n_head_kv, c.head_dim, c.n_rot, cs, sn, isa);
  }
  if (c.scale_queries) {  // in f32 before the fp16 rounding below, as gemma3's graph does
    const float scale = c.query_scale();
    for (int64_t j = 0; j < Q; ++j) q[j] *= scale;
  }
  const SequenceSlice& s = b.seqs[token_seq_[i]];
  const int32_t pos = b.positions[i];
  const int32_t block = table_of(b, s, l)[pos / config_.block_size];
  if (config_.kv_dtype == KvDtype::kQ8_0) {
    // Q, K and V rotated as llama.cpp rotates them around a quantized cache (hadamard.hpp);
    // flash attention quantizes the f32 queries itself (attention_q8.hpp).
    if (const int32_t rotation = kv_rotation_block(c.head_dim); rotation > 0) {
      hadamard_rotate(q, Q, rotation, isa);
      hadamard_rotate(k, KV, rotation, isa);
      hadamard_rotate(v, KV, kKvRotationVBlock, isa);
    }
    kv_store_q8_0(kv_layer(l), block, pos % config_.block_size, k, v, isa);
    return;
  }
  // Queries meet fp16 keys as fp16, as in ggml's attention (K's vec_dot type is F16).
  round_to_fp16(q, Q, isa);
  kv_store(kv_layer(l), block, pos % config_.block_size, k, v, isa);
}

void LlamaForward::attention_block(const StepBatch& b, int32_t l, ThreadPool& pool) {
  const model::LlamaConfig& c = weights_.config();
  const int64_t T = b.num_tokens();
  const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), W = Q + 2 * KV;
  const IsaLevel isa = config_.isa;
  const Layer& L = layers_[l];
  // Each row group quantized for the QKV product on the thread that normed it (no second job,
  // no row fetched from the other core's cache).
  size_input(L.qkv, T);
  for_row_groups(T, pool, [&](int64_t b, int64_t e) {
    rmsnorm_rows(x_.data() + b * E, E, L.attn_norm, h_.data() + b * E, E, e - b, E, c.rms_eps,
                 isa);
    quantize_input(L.qkv, h_.data(), E, b, e);
  });
  observe("attn_norm", l, h_.data(), T, E, E);
  multiply(L.qkv, h_.data(), E, T, qkv_.data(), W, pool, q8k_orders_.data());
  observe("qkv", l, qkv_.data(), T, W, W);
  for_each_row(T, pool, [&](int64_t i) { prepare_qkv_row(b, l, i); });
  observe("qk_rope", l, qkv_.data(), T, Q + KV, W);  // q already rounded to fp16 here
  attention(b, l, pool);
  observe("kqv_out", l, attn_.data(), T, Q, Q);
  if (config_.kv_dtype == KvDtype::kQ8_0 && kv_rotation_block(c.head_dim) > 0) {
    // The output back from V's rotation (its own inverse), as llama.cpp does after kqv_out.
    for_each_row(T, pool, [&](int64_t i) {
      hadamard_rotate(attn_.data() + i * Q, Q, kKvRotationVBlock, isa);
    });
  }
  project(L.wo, attn_.data(), Q, T, tmp_.data(), E, pool, q8k_orders_.data());
  observe("attn_out", l, tmp_.data(), T, E, E);
}

void LlamaForward::feed_forward_block(int64_t T, int32_t l, ThreadPool& pool) {
  const model::LlamaConfig& c = weights_.config();
  const int64_t E = c.n_embd, F = c.n_ff;
  const IsaLevel isa = config_.isa;
  const Layer& L = layers_[l];
  size_input(L.gate_up, T);  // quantized in the norm's job, as the QKV input
  for_row_groups(T, pool, [&](int64_t b, int64_t e) {
    float* x = x_.data() + b * E;
    float* t = tmp_.data() + b * E;
    if (L.post_attn_norm) rmsnorm_rows(t, E, L.post_attn_norm, t, E, e - b, E, c.rms_eps, isa);
    for (int64_t j = 0; j < (e - b) * E; ++j) x[j] += t[j];
    rmsnorm_rows(x, E, L.ffn_norm, h_.data() + b * E, E, e - b, E, c.rms_eps, isa);
    quantize_input(L.gate_up, h_.data(), E, b, e);
  });
  observe("ffn_inp", l, x_.data(), T, E, E);
  observe("ffn_norm", l, h_.data(), T, E, E);
  multiply(L.gate_up, h_.data(), E, T, gu_.data(), 2 * F, pool, q8k_orders_.data());
  observe("gate_up", l, gu_.data(), T, 2 * F, 2 * F);
  const bool gelu = c.ffn_activation == model::FfnActivation::kGeluTanh;
  size_input(L.down, T);  // quantized in the activation's job
  for_row_groups(T, pool, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float* gate = gu_.data() + i * 2 * F;
      if (gelu) {
        geglu(gate, gate + F, act_.data() + i * F, F);
      } else {
        swiglu(gate, gate + F, act_.data() + i * F, F, isa);
      }
    }
    quantize_input(L.down, act_.data(), F, b, e);
  });
  observe("ffn_swiglu", l, act_.data(), T, F, F);
  multiply(L.down, act_.data(), F, T, tmp_.data(), E, pool, q8k_orders_.data());
  observe("ffn_out", l, tmp_.data(), T, E, E);
  for_row_groups(T, pool, [&](int64_t b, int64_t e) {
    float* x = x_.data() + b * E;
    float* t = tmp_.data() + b * E;
    if (L.post_ffn_norm) rmsnorm_rows(t, E, L.post_ffn_norm, t, E, e - b, E, c.rms_eps, isa);
    for (int64_t j = 0; j < (e - b) * E; ++j) x[j] += t[j];
  });
  observe("l_out", l, x_.data(), T, E, E);
}

const std::vector<float>& LlamaForward::logits(const StepBatch& b, ThreadPool& pool) {
  const model::LlamaConfig& c = weights_.config();
  const int64_t E = c.n_embd;
  int64_t S = 0;
  for (const SequenceSlice& s : b.seqs) {
    if (!s.sample) continue;
    // The last position, and before it one per draft (a verify span).
    for (int64_t row = s.token_offset + s.num_tokens - 1 - s.num_draft_tokens;
         row < s.token_offset + s.num_tokens; ++row) {
      rmsnorm(x_.data() + row * E, weights_.output_norm().as_f32(), h_.data() + S * E, E,
              c.rms_eps, config_.isa);
      ++S;
    }
  }
  logits_.resize(S * c.n_vocab);
  observe("result_norm", -1, h_.data(), S, E, E);
  if (S > 0) project(output_, h_.data(), E, S, logits_.data(), c.n_vocab, pool);
  prompt_output_rows(b);
  return logits_;
}

// The same final norm as the sampling rows', so a scored position's logits (project_output())
// are bit for bit those a sampling step at that position would compute.
void LlamaForward::prompt_output_rows(const StepBatch& b) {
  const model::LlamaConfig& c = weights_.config();
  const int64_t E = c.n_embd;
  prompt_rows_.assign(b.seqs.size(), PromptRows{});
  int64_t total = 0;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const SequenceSlice& s = b.seqs[i];
    if (!s.has_prompt_outputs()) continue;
    int32_t begin = s.context_len;
    int32_t end = s.context_len - s.num_tokens;
    if (s.num_scored > 0) {
      begin = std::min(begin, s.scored_begin);
      end = std::max(end, s.scored_begin + s.num_scored);
    }
    if (s.num_hidden > 0) {
      begin = std::min(begin, s.hidden_begin);
      end = std::max(end, s.hidden_begin + s.num_hidden);
    }
    prompt_rows_[i] = PromptRows{begin, end - begin, total};
    total += end - begin;
  }
  prompt_hidden_.resize(static_cast<size_t>(total * E));
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const PromptRows& rows = prompt_rows_[i];
    const SequenceSlice& s = b.seqs[i];
    const int64_t first_token = s.token_offset + (rows.first_position - (s.context_len - s.num_tokens));
    for (int32_t r = 0; r < rows.num_rows; ++r) {
      rmsnorm(x_.data() + (first_token + r) * E, weights_.output_norm().as_f32(),
              prompt_hidden_.data() + (rows.first_row + r) * E, E, c.rms_eps, config_.isa);
    }
  }
}

void LlamaForward::project_output(const float* hidden, int64_t rows, float* logits,
                                  ThreadPool& pool) {
  const model::LlamaConfig& c = weights_.config();
  if (rows > 0) project(output_, hidden, c.n_embd, rows, logits, c.n_vocab, pool);
}

const std::vector<float>* LlamaForward::forward(const StepBatch& b, ThreadPool& pool) {
  using Clock = std::chrono::steady_clock;
  const auto ms = [](Clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  };
  const Clock::time_point started = Clock::now();
  last_layers_ms_ = last_logits_ms_ = 0;
  validate(b);
  resolve_tables(b);
  prepare_scratch(b, pool);
  embed(b);
  const int32_t num_layers = weights_.config().n_layer;
  for (int32_t l = 0; l < num_layers; ++l) {
    // Given up only in the first half: past it, finishing is the shorter wait for the newcomer
    // who asked and wastes less. The KV written so far is at positions the scheduler recomputes.
    if (b.interrupt && 2 * l < num_layers && b.interrupt->requested()) {
      last_layers_ms_ = ms(Clock::now() - started);
      return nullptr;
    }
    attention_block(b, l, pool);
    feed_forward_block(b.num_tokens(), l, pool);
  }
  const Clock::time_point layers_done = Clock::now();
  last_layers_ms_ = ms(layers_done - started);
  const std::vector<float>& computed = logits(b, pool);
  last_logits_ms_ = ms(Clock::now() - layers_done);
  return &computed;
}

}  // namespace troupe::gpu::cpu
