// Seeded random llama weights (see dummy_weights.hpp). Quantized blocks are written directly
// (random scales and codes) rather than quantized from floats: as fast as filling memory.
#include "model/dummy_weights.hpp"

#include "model/fp16.hpp"
#include "model/quants/kquant.hpp"
#include "model/quants/q4_q8.hpp"
#include "model/quants/q5.hpp"

#include <cstddef>
#include <cstring>
#include <map>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace troupe::model {
namespace {

// splitmix64: fast, seedable, good enough for weights.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }  // [0,1)
  float symmetric(float a) { return (2.0f * uniform() - 1.0f) * a; }
};

void put_half(std::byte* p, float f) { (void)store_half(p, f); }

void put_bf16(std::byte* p, float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  x += 0x7FFFu + ((x >> 16) & 1u);
  const uint16_t b = static_cast<uint16_t>(x >> 16);
  std::memcpy(p, &b, 2);
}

constexpr float kStd = 0.02f;
constexpr float kUniformHalfWidth = kStd * 1.7320508f;  // uniform(-a, a) has std a / sqrt(3)

// Random bytes with a fresh 64-bit draw per 8 (the stream every dummy model was made with).
// int8 codes avoid -128: llama.cpp writes Q8_0 codes in [-127, 127].
void fill_random_bytes(uint8_t* p, size_t n, bool int8_codes, Rng& rng) {
  uint64_t r = 0;
  for (size_t i = 0; i < n; ++i, r >>= 8) {
    if (i % 8 == 0) r = rng.next();
    uint8_t v = static_cast<uint8_t>(r);
    if (int8_codes && v == 0x80) v = 0x81;
    p[i] = v;
  }
}

// Where a 32-value block's codes start: everything after its scale (and min) is codes, and every
// byte pattern there is valid.
template <class Block>
constexpr size_t first_code_byte() {
  if constexpr (requires(Block b) { b.qh; }) {
    return offsetof(Block, qh);
  } else {
    return offsetof(Block, qs);
  }
}

// 32-value blocks (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0) of random codes whose std is `code_std` steps; a
// min of -min_steps steps centres unsigned codes as Q4_0's -8 and Q5_0's -16 do.
template <class Block>
void fill_blocks(std::byte* out, int64_t n, float code_std, float min_steps, Rng& rng) {
  const float d_mean = kStd / code_std;
  for (int64_t b = 0; b < n / Block::kElements; ++b) {
    Block blk{};
    const float d = d_mean * (0.75f + 0.5f * rng.uniform());
    blk.d = fp32_to_fp16(d);
    if constexpr (requires(Block x) { x.m; }) blk.m = fp32_to_fp16(-min_steps * d);
    constexpr size_t kFirst = first_code_byte<Block>();
    fill_random_bytes(reinterpret_cast<uint8_t*>(&blk) + kFirst, sizeof(Block) - kFirst,
                      std::is_same_v<Block, quants::BlockQ8_0>, rng);
    quants::store_block(out, b, blk);
  }
}

void fill_matrix(std::byte* out, TensorType type, int64_t inputs, int64_t outputs, Rng& rng) {
  const int64_t n = inputs * outputs;
  switch (type) {
    case TensorType::kF32:
      for (int64_t i = 0; i < n; ++i) {
        const float f = rng.symmetric(kUniformHalfWidth);
        std::memcpy(out + 4 * i, &f, 4);
      }
      return;
    case TensorType::kF16:
      for (int64_t i = 0; i < n; ++i) put_half(out + 2 * i, rng.symmetric(kUniformHalfWidth));
      return;
    case TensorType::kBF16:
      for (int64_t i = 0; i < n; ++i) put_bf16(out + 2 * i, rng.symmetric(kUniformHalfWidth));
      return;
    // Code std: 4-bit uniform ~4.6, 5-bit ~9.2, int8 uniform(-127, 127) ~73.
    case TensorType::kQ4_0: fill_blocks<quants::BlockQ4_0>(out, n, 4.6f, 0.0f, rng); return;
    case TensorType::kQ4_1: fill_blocks<quants::BlockQ4_1>(out, n, 4.6f, 7.5f, rng); return;
    case TensorType::kQ8_0: fill_blocks<quants::BlockQ8_0>(out, n, 73.0f, 0.0f, rng); return;
    case TensorType::kQ5_0: fill_blocks<quants::BlockQ5_0>(out, n, 9.2f, 0.0f, rng); return;
    case TensorType::kQ5_1: fill_blocks<quants::BlockQ5_1>(out, n, 9.2f, 15.5f, rng); return;
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K: {
      // K-quant scales come from the data, so quantize real random rows (one row at a time).
      std::vector<float> row(inputs);
      const uint64_t bytes = row_bytes(type, inputs);
      for (int64_t o = 0; o < outputs; ++o) {
        for (float& f : row) f = rng.symmetric(kUniformHalfWidth);
        std::byte* dst = out + o * bytes;
        if (type == TensorType::kQ4_K) quants::quantize_row_q4_k(row.data(), inputs, dst);
        if (type == TensorType::kQ5_K) quants::quantize_row_q5_k(row.data(), inputs, dst);
        if (type == TensorType::kQ6_K) quants::quantize_row_q6_k(row.data(), inputs, dst);
      }
      return;
    }
    default:
      throw std::invalid_argument("dummy weights: type " + std::string(tensor_type_name(type)) +
                                  " is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                                  "Q5_1, Q4_K, Q5_K, Q6_K)");
  }
}

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third between.
bool use_more_bits(int32_t layer, int32_t num_layers) {
  return layer < num_layers / 8 || layer >= 7 * num_layers / 8 ||
         (layer - num_layers / 8) % 3 == 2;
}

// The type of matrix `name` (layer -1: not per layer) under `mix`, before any fallback.
TensorType mix_type(const std::string& name, int32_t layer, const LlamaConfig& c, TensorType type,
                    DummyMix mix) {
  switch (mix) {
    case DummyMix::kUniform: return type;
    case DummyMix::kQ4_K_M: {
      const bool output = name == "output.weight" || (c.tied_output && name == "token_embd.weight");
      const bool more = name.find("attn_v") != std::string::npos || name.find("ffn_down") != std::string::npos;
      if (output || (more && use_more_bits(layer, c.n_layer))) return TensorType::kQ6_K;
      return TensorType::kQ4_K;
    }
  }
  return type;
}

// K-quants need rows of whole super-blocks; llama.cpp's llama_tensor_get_type falls back per
// tensor (convert_incompatible_tensor): Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, and to F16
// when the row is not even a multiple of 32.
TensorType with_fallback(TensorType t, int64_t inputs) {
  if (inputs % 256 == 0) return t;
  TensorType fallback = t;
  switch (t) {
    case TensorType::kQ4_K: fallback = TensorType::kQ5_0; break;
    case TensorType::kQ5_K: fallback = TensorType::kQ5_1; break;
    case TensorType::kQ6_K: fallback = TensorType::kQ8_0; break;
    default: return t;
  }
  return inputs % 32 == 0 ? fallback : TensorType::kF16;
}

}  // namespace

namespace {

// One tensor of the file llama.cpp would write for the config.
struct TensorSpec {
  std::string name;
  int64_t inputs, outputs;
  bool matrix;
  int32_t layer = -1;
};

// Every tensor of the config, in GGUF's order.
std::vector<TensorSpec> tensor_specs(const LlamaConfig& c) {
  std::vector<TensorSpec> specs;
  specs.push_back({"token_embd.weight", c.n_embd, c.n_vocab, true});
  specs.push_back({"output_norm.weight", c.n_embd, 1, false});
  if (!c.tied_output) specs.push_back({"output.weight", c.n_embd, c.n_vocab, true});
  if (c.rope_llama3) specs.push_back({"rope_freqs.weight", c.n_rot / 2, 1, false});
  for (int32_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    specs.push_back({p + "attn_norm.weight", c.n_embd, 1, false});
    specs.push_back({p + "attn_q.weight", c.n_embd, c.q_dim(), true, i});
    specs.push_back({p + "attn_k.weight", c.n_embd, c.kv_dim(), true, i});
    specs.push_back({p + "attn_v.weight", c.n_embd, c.kv_dim(), true, i});
    specs.push_back({p + "attn_output.weight", c.q_dim(), c.n_embd, true, i});
    if (c.qkv_bias) {
      specs.push_back({p + "attn_q.bias", c.q_dim(), 1, false});
      specs.push_back({p + "attn_k.bias", c.kv_dim(), 1, false});
      specs.push_back({p + "attn_v.bias", c.kv_dim(), 1, false});
    }
    if (c.qk_norm) {
      specs.push_back({p + "attn_q_norm.weight", c.head_dim, 1, false});
      specs.push_back({p + "attn_k_norm.weight", c.head_dim, 1, false});
    }
    if (c.post_norms) {
      specs.push_back({p + "post_attention_norm.weight", c.n_embd, 1, false});
      specs.push_back({p + "post_ffw_norm.weight", c.n_embd, 1, false});
    }
    specs.push_back({p + "ffn_norm.weight", c.n_embd, 1, false});
    specs.push_back({p + "ffn_gate.weight", c.n_embd, c.n_ff, true, i});
    specs.push_back({p + "ffn_up.weight", c.n_embd, c.n_ff, true, i});
    specs.push_back({p + "ffn_down.weight", c.n_ff, c.n_embd, true, i});
  }
  return specs;
}

// The layers' views, by name.
std::vector<LlamaLayerWeights> layer_views(const std::map<std::string, WeightView>& views,
                                           const LlamaConfig& c) {
  std::vector<LlamaLayerWeights> layers;
  for (int32_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LlamaLayerWeights l;
    l.attn_norm = views.at(p + "attn_norm.weight");
    l.wq = views.at(p + "attn_q.weight");
    l.wk = views.at(p + "attn_k.weight");
    l.wv = views.at(p + "attn_v.weight");
    l.wo = views.at(p + "attn_output.weight");
    if (c.qkv_bias) {
      l.bq = views.at(p + "attn_q.bias");
      l.bk = views.at(p + "attn_k.bias");
      l.bv = views.at(p + "attn_v.bias");
    }
    if (c.qk_norm) {
      l.q_norm = views.at(p + "attn_q_norm.weight");
      l.k_norm = views.at(p + "attn_k_norm.weight");
    }
    if (c.post_norms) {
      l.post_attn_norm = views.at(p + "post_attention_norm.weight");
      l.post_ffn_norm = views.at(p + "post_ffw_norm.weight");
    }
    l.ffn_norm = views.at(p + "ffn_norm.weight");
    l.w_gate = views.at(p + "ffn_gate.weight");
    l.w_up = views.at(p + "ffn_up.weight");
    l.w_down = views.at(p + "ffn_down.weight");
    layers.push_back(std::move(l));
  }
  return layers;
}

}  // namespace

LlamaWeights make_dummy_weights(const LlamaConfig& config, TensorType type, uint64_t seed,
                                DummyMix mix) {
  config.validate();
  const LlamaConfig& c = config;
  const std::vector<TensorSpec> specs = tensor_specs(c);
  // What llama.cpp's converter writes for this config.
  const std::vector<float> rope_factors =
      c.rope_llama3 ? llama3_rope_freq_factors(c.n_rot, c.rope_freq_base, *c.rope_llama3)
                    : std::vector<float>{};
  // One allocation, each tensor 64-byte aligned.
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  std::vector<TensorType> types;
  for (const TensorSpec& s : specs) {
    const TensorType t =
        s.matrix ? with_fallback(mix_type(s.name, s.layer, c, type, mix), s.inputs) : TensorType::kF32;
    types.push_back(t);
    if (s.matrix && s.inputs % traits_of(t).block_elements != 0) {
      throw std::invalid_argument("dummy weights: " + s.name + " row length " +
                                  std::to_string(s.inputs) + " is not a multiple of the " +
                                  std::string(tensor_type_name(t)) + " block");
    }
    offsets.push_back(total);
    total += (row_bytes(t, s.inputs) * s.outputs + 63) / 64 * 64;
  }
  auto storage = std::shared_ptr<std::byte[]>(new std::byte[total + 64]);
  std::byte* base = storage.get();

  Rng rng{seed * 0x2545F4914F6CDD1Dull + 1};
  std::map<std::string, WeightView> views;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    WeightView v;
    v.name = s.name;
    v.type = types[i];
    v.num_inputs = s.inputs;
    v.num_outputs = s.outputs;
    v.data = base + offsets[i];
    v.num_bytes = row_bytes(v.type, s.inputs) * s.outputs;
    std::byte* out = base + offsets[i];
    if (s.matrix) {
      fill_matrix(out, v.type, s.inputs, s.outputs, rng);
    } else if (s.name == "rope_freqs.weight") {
      std::memcpy(out, rope_factors.data(), rope_factors.size() * sizeof(float));
    } else {
      const bool bias = s.name.find(".bias") != std::string::npos;
      for (int64_t k = 0; k < s.inputs; ++k) {
        const float f = bias ? rng.symmetric(0.05f) : 1.0f + rng.symmetric(0.1f);
        std::memcpy(out + 4 * k, &f, 4);
      }
    }
    views.emplace(s.name, std::move(v));
  }
  std::optional<WeightView> output;
  if (!c.tied_output) output = views.at("output.weight");
  std::optional<WeightView> rope_freqs;
  if (c.rope_llama3) rope_freqs = views.at("rope_freqs.weight");
  return LlamaWeights::from_views(
      config, views.at("token_embd.weight"), views.at("output_norm.weight"), std::move(output),
      layer_views(views, c), std::shared_ptr<const void>(storage, base), std::move(rope_freqs));
}

LlamaWeights make_dummy_weights(const DummyWeightsSpec& spec) {
  const auto config = LlamaConfig::named_shape(spec.shape);
  if (!config) {
    std::string known;
    for (const std::string& n : LlamaConfig::named_shapes()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("dummy weights: unknown shape '" + spec.shape + "' (known: " + known + ")");
  }
  return make_dummy_weights(*config, spec.type, spec.seed, spec.mix);
}

}  // namespace troupe::model
