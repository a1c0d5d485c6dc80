// Tensor look-up and validation for llama-family weights (GGUF_NOTES.md §3 names and shapes).
#include "model/llama_weights.hpp"

#include <cmath>
#include <map>
#include <string>

namespace troupe::model {
namespace {

std::string shape_str(int64_t a, int64_t b, bool matrix) {
  return matrix ? "[" + std::to_string(a) + ", " + std::to_string(b) + "]"
                : "[" + std::to_string(a) + "]";
}

WeightView view_of(const GgufTensorInfo& t) {
  WeightView v;
  v.name = t.name;
  v.type = t.type;
  v.num_inputs = static_cast<int64_t>(t.dims[0]);
  v.num_outputs = static_cast<int64_t>(t.rows());
  v.data = t.data;
  v.num_bytes = t.num_bytes;
  return v;
}

// Checks one view: vectors must be F32 of `inputs` elements; matrices [inputs, outputs] of a
// type with block traits whose block divides the row.
void check(const WeightView& v, int64_t inputs, int64_t outputs, bool matrix) {
  const bool shape_ok = v.num_inputs == inputs && v.num_outputs == (matrix ? outputs : 1);
  if (!shape_ok) {
    throw GgufError("tensor " + v.name + ": expected shape " + shape_str(inputs, outputs, matrix) +
                    ", file has " + shape_str(v.num_inputs, v.num_outputs, v.num_outputs != 1));
  }
  if (!matrix && v.type != TensorType::kF32) {
    throw GgufError("tensor " + v.name + ": expected type F32, file has " +
                    std::string(tensor_type_name(v.type)));
  }
  const TensorTypeTraits t = traits_of(v.type);
  if (v.num_inputs % t.block_elements != 0) {
    throw GgufError("tensor " + v.name + ": row of " + std::to_string(v.num_inputs) +
                    " elements is not a multiple of the " + std::string(t.name) + " block");
  }
  const uint64_t want = row_bytes(v.type, v.num_inputs) * static_cast<uint64_t>(v.num_outputs);
  if (v.data == nullptr || v.num_bytes < want) {
    throw GgufError("tensor " + v.name + ": " + std::to_string(v.num_bytes) + " bytes, expected " +
                    std::to_string(want));
  }
}

// rope_freqs.weight: exactly n_rot / 2 F32 divisors, each positive and finite (a zero or NaN
// factor would silently turn every rotation angle of that pair into NaN).
void check_rope_freqs(const WeightView& v, int32_t n_rot) {
  const int64_t half = n_rot / 2;
  if (v.num_inputs != half || v.num_outputs != 1) {
    throw GgufError("tensor " + v.name + ": expected shape " + shape_str(half, 1, false) +
                    " (n_rot / 2 RoPE frequency factors), file has " +
                    shape_str(v.num_inputs, v.num_outputs, v.num_outputs != 1));
  }
  check(v, half, 1, false);  // type F32 and enough bytes
  for (int64_t i = 0; i < half; ++i) {
    const float f = v.as_f32()[i];
    if (!(f > 0.0f) || !std::isfinite(f)) {
      throw GgufError("tensor " + v.name + ": factor [" + std::to_string(i) +
                      "] = " + std::to_string(f) + " is not a positive finite number");
    }
  }
}

}  // namespace

LlamaWeights LlamaWeights::from_gguf(const GgufFile& file) {
  LlamaWeights w;
  w.config_ = LlamaConfig::from_gguf(file);
  auto get = [&](const std::string& name) -> WeightView {
    const GgufTensorInfo* t = file.find_tensor(name);
    if (t == nullptr) throw GgufError("missing tensor " + name + " in " + file.path().string());
    return view_of(*t);
  };
  auto maybe = [&](const std::string& name) -> std::optional<WeightView> {
    if (const GgufTensorInfo* t = file.find_tensor(name)) return view_of(*t);
    return std::nullopt;
  };
  w.token_embd_ = get("token_embd.weight");
  w.output_norm_ = get("output_norm.weight");
  w.output_ = maybe("output.weight");
  w.rope_freqs_ = maybe("rope_freqs.weight");  // optional: Llama 3.1+ only
  for (int32_t i = 0; i < w.config_.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LlamaLayerWeights l;
    l.attn_norm = get(p + "attn_norm.weight");
    l.wq = get(p + "attn_q.weight");
    l.wk = get(p + "attn_k.weight");
    l.wv = get(p + "attn_v.weight");
    l.wo = get(p + "attn_output.weight");
    if (w.config_.qkv_bias) {
      l.bq = get(p + "attn_q.bias");
      l.bk = get(p + "attn_k.bias");
      l.bv = get(p + "attn_v.bias");
    }
    if (w.config_.qk_norm) {
      l.q_norm = get(p + "attn_q_norm.weight");
      l.k_norm = get(p + "attn_k_norm.weight");
    }
    if (w.config_.post_norms) {
      l.post_attn_norm = get(p + "post_attention_norm.weight");
      l.post_ffn_norm = get(p + "post_ffw_norm.weight");
    }
    l.ffn_norm = get(p + "ffn_norm.weight");
    l.w_gate = get(p + "ffn_gate.weight");
    l.w_up = get(p + "ffn_up.weight");
    l.w_down = get(p + "ffn_down.weight");
    w.layers_.push_back(std::move(l));
  }
  w.validate();
  return w;
}

LlamaWeights LlamaWeights::from_gguf(std::shared_ptr<const GgufFile> file) {
  LlamaWeights w = from_gguf(*file);
  w.storage_ = std::move(file);
  return w;
}

LlamaWeights LlamaWeights::from_views(LlamaConfig config, WeightView token_embd,
                                      WeightView output_norm, std::optional<WeightView> output,
                                      std::vector<LlamaLayerWeights> layers,
                                      std::shared_ptr<const void> storage,
                                      std::optional<WeightView> rope_freqs) {
  LlamaWeights w;
  w.config_ = std::move(config);
  w.config_.tied_output = !output.has_value();
  w.token_embd_ = std::move(token_embd);
  w.output_norm_ = std::move(output_norm);
  w.output_ = std::move(output);
  w.layers_ = std::move(layers);
  w.rope_freqs_ = std::move(rope_freqs);
  w.storage_ = std::move(storage);
  w.validate();
  return w;
}

void LlamaWeights::validate() const {
  const LlamaConfig& c = config_;
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw GgufError(e.what());
  }
  if (static_cast<int32_t>(layers_.size()) != c.n_layer) {
    throw GgufError("expected " + std::to_string(c.n_layer) + " layers, have " +
                    std::to_string(layers_.size()));
  }
  check(token_embd_, c.n_embd, c.n_vocab, true);
  check(output_norm_, c.n_embd, 1, false);
  if (output_) check(*output_, c.n_embd, c.n_vocab, true);
  if (rope_freqs_) check_rope_freqs(*rope_freqs_, c.n_rot);
  for (const LlamaLayerWeights& l : layers_) {
    check(l.attn_norm, c.n_embd, 1, false);
    check(l.wq, c.n_embd, c.q_dim(), true);
    check(l.wk, c.n_embd, c.kv_dim(), true);
    check(l.wv, c.n_embd, c.kv_dim(), true);
    check(l.wo, c.q_dim(), c.n_embd, true);
    if (c.qkv_bias) {
      if (!l.bq || !l.bk || !l.bv) throw GgufError("qwen2 layer without attn_q/k/v.bias");
      check(*l.bq, c.q_dim(), 1, false);
      check(*l.bk, c.kv_dim(), 1, false);
      check(*l.bv, c.kv_dim(), 1, false);
    }
    if (c.qk_norm) {
      if (!l.q_norm || !l.k_norm) throw GgufError("QK-norm layer without attn_q_norm/attn_k_norm");
      check(*l.q_norm, c.head_dim, 1, false);
      check(*l.k_norm, c.head_dim, 1, false);
    }
    if (c.post_norms) {
      if (!l.post_attn_norm || !l.post_ffn_norm) {
        throw GgufError("layer without post_attention_norm/post_ffw_norm");
      }
      check(*l.post_attn_norm, c.n_embd, 1, false);
      check(*l.post_ffn_norm, c.n_embd, 1, false);
    }
    check(l.ffn_norm, c.n_embd, 1, false);
    check(l.w_gate, c.n_embd, c.n_ff, true);
    check(l.w_up, c.n_embd, c.n_ff, true);
    check(l.w_down, c.n_ff, c.n_embd, true);
  }
}

std::span<const float> LlamaWeights::rope_freq_factors() const {
  if (!rope_freqs_) return {};
  return {rope_freqs_->as_f32(), static_cast<size_t>(rope_freqs_->num_inputs)};
}

std::string LlamaWeights::main_type_name() const {
  std::map<std::string, int> counts;
  for (const LlamaLayerWeights& l : layers_) {
    for (const WeightView* v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      counts[std::string(tensor_type_name(v->type))]++;
    }
  }
  std::string best;
  int n = -1;
  for (const auto& [name, c] : counts) {
    if (c > n) best = name, n = c;
  }
  return best;
}

}  // namespace troupe::model
