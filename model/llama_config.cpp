// LlamaConfig from GGUF metadata (GGUF_NOTES.md §1 key table) and the named dummy shapes.
#include "model/llama_config.hpp"

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace troupe::model {
namespace {

int32_t to_i32(uint64_t v, std::string_view key) {
  if (v > static_cast<uint64_t>(INT32_MAX)) {
    throw GgufError("metadata " + std::string(key) + " = " + std::to_string(v) + " is too large");
  }
  return static_cast<int32_t>(v);
}

}  // namespace

float LlamaConfig::attention_scale() const {
  return scale_queries ? 1.0f : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

float LlamaConfig::rope_base(int32_t layer) const {
  return is_sliding(layer) ? rope_freq_base_sliding : rope_freq_base;
}

float LlamaConfig::rope_scale(int32_t layer) const {
  return is_sliding(layer) ? 1.0f : rope_freq_scale;
}

float LlamaConfig::query_scale() const {
  return scale_queries ? 1.0f / std::sqrt(static_cast<float>(head_dim)) : 1.0f;
}

namespace {

// gemma3 (llama.cpp src/models/gemma3.cpp, llama_model_gemma3::load_arch_hparams): the
// embeddings scaled by sqrt(n_embd), QK norms and post norms, GEGLU, Q scaled before attention
// by 1/sqrt(head_dim) (the 27B's 1/sqrt(n_embd / n_head) is the same number only when
// head_dim = n_embd / n_head, so a 62-layer file is refused), and sliding-window layers in a
// pattern of 6 (five sliding, then one global) unless the file lists them, with RoPE base 10000
// there. The file's keys are read by read_gemma3; the seams themselves by apply_gemma3_seams,
// which the named dummy shape uses too.
void apply_gemma3_seams(LlamaConfig& c, int32_t sliding_window) {
  c.rope_mode = RopeMode::kNeox;
  c.embedding_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.qk_norm = true;
  c.post_norms = true;
  c.ffn_activation = FfnActivation::kGeluTanh;
  c.scale_queries = true;
  c.sliding_window = sliding_window;
  c.sliding_layers.clear();
  if (sliding_window > 0) {
    constexpr int32_t kPattern = 6;
    c.sliding_layers.resize(static_cast<size_t>(std::max(c.n_layer, 0)));
    for (int32_t i = 0; i < c.n_layer; ++i) c.sliding_layers[static_cast<size_t>(i)] = i % kPattern < kPattern - 1;
  }
}

void read_gemma3(const GgufFile& file, const std::string& a, LlamaConfig& c) {
  if (c.n_layer == 62 && c.head_dim * c.n_head != c.n_embd) {
    throw GgufError("gemma3 with 62 layers (27B) scales queries by 1/sqrt(n_embd / n_head), "
                    "which troupe does not implement");
  }
  if (file.find(a + "final_logit_softcapping") != nullptr) {
    throw GgufError(a + "final_logit_softcapping is not supported");
  }
  if (file.find(a + "attention.sliding_window_pattern") != nullptr) {
    throw GgufError(a + "attention.sliding_window_pattern is not supported (the default "
                    "pattern of 6 is)");
  }
  int32_t window = 0;
  if (auto w = file.get_uint(a + "attention.sliding_window"); w && *w > 0) {
    if (*w > static_cast<uint64_t>(INT32_MAX)) throw GgufError(a + "attention.sliding_window is too large");
    window = static_cast<int32_t>(*w);
  }
  apply_gemma3_seams(c, window);
  if (auto v = file.get_float(a + "rope.freq_base_swa")) c.rope_freq_base_sliding = static_cast<float>(*v);
}

}  // namespace

LlamaConfig LlamaConfig::from_gguf(const GgufFile& file) {
  LlamaConfig c;
  c.architecture = std::string(file.architecture());
  if (c.architecture == "llama" || c.architecture == "mistral") {
    c.rope_mode = RopeMode::kNorm;
  } else if (c.architecture == "qwen2") {
    c.rope_mode = RopeMode::kNeox;
    c.qkv_bias = true;
  } else if (c.architecture != "gemma3") {
    throw GgufError("architecture '" + c.architecture +
                    "' is not supported (llama, mistral, qwen2, gemma3)");
  }
  const std::string a = c.architecture + ".";
  auto req = [&](const char* key) { return to_i32(file.require_uint(a + key), a + key); };
  auto opt = [&](const char* key) -> std::optional<int32_t> {
    if (auto v = file.get_uint(a + key)) return to_i32(*v, a + key);
    return std::nullopt;
  };
  c.n_embd = req("embedding_length");
  c.n_layer = req("block_count");
  c.n_ff = req("feed_forward_length");
  c.n_head = req("attention.head_count");
  c.n_head_kv = opt("attention.head_count_kv").value_or(c.n_head);
  c.context_length = opt("context_length").value_or(2048);
  if (c.n_head <= 0) throw GgufError(a + "attention.head_count must be positive");
  c.head_dim = opt("attention.key_length").value_or(c.n_embd / c.n_head);
  c.n_rot = opt("rope.dimension_count").value_or(c.head_dim);
  if (auto v = opt("vocab_size")) {
    c.n_vocab = *v;
  } else if (const GgufValue* tokens = file.find("tokenizer.ggml.tokens"); tokens && tokens->is_array()) {
    c.n_vocab = to_i32(tokens->size(), "tokenizer.ggml.tokens");
  } else if (const GgufTensorInfo* emb = file.find_tensor("token_embd.weight")) {
    c.n_vocab = to_i32(emb->dims[1], "token_embd.weight dims[1]");
  }
  if (auto v = file.get_float(a + "rope.freq_base")) c.rope_freq_base = static_cast<float>(*v);
  if (auto v = file.get_float(a + "attention.layer_norm_rms_epsilon")) c.rms_eps = static_cast<float>(*v);
  const std::string scaling(file.get_string(a + "rope.scaling.type").value_or("none"));
  const double factor = file.get_float(a + "rope.scaling.factor").value_or(
      file.get_float(a + "rope.scale_linear").value_or(1.0));
  if (scaling == "linear" || (scaling == "none" && factor != 1.0 && file.find(a + "rope.scale_linear"))) {
    if (factor <= 0) throw GgufError(a + "rope.scaling.factor must be positive");
    c.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling != "none") {
    throw GgufError(a + "rope.scaling.type '" + scaling + "' is not supported (none, linear)");
  }
  c.tied_output = file.find_tensor("output.weight") == nullptr;
  if (c.architecture == "gemma3") read_gemma3(file, a, c);
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw GgufError(e.what());
  }
  return c;
}

std::optional<LlamaConfig> LlamaConfig::named_shape(std::string_view name) {
  auto make = [](int32_t vocab, int32_t embd, int32_t layers, int32_t heads, int32_t kv,
                 int32_t ff, float base, int32_t ctx, bool tied) {
    LlamaConfig c;
    c.n_vocab = vocab;
    c.n_embd = embd;
    c.n_layer = layers;
    c.n_head = heads;
    c.n_head_kv = kv;
    c.head_dim = embd / heads;
    c.n_rot = c.head_dim;
    c.n_ff = ff;
    c.rope_freq_base = base;
    c.context_length = ctx;
    c.tied_output = tied;
    c.rms_eps = 1e-5f;
    return c;
  };
  if (name == "smollm2-135m") return make(49152, 576, 30, 9, 3, 1536, 100000.0f, 8192, true);
  if (name == "smollm2-360m") return make(49152, 960, 32, 15, 5, 2560, 100000.0f, 8192, true);
  if (name == "tinyllama-1.1b") return make(32000, 2048, 22, 32, 4, 5632, 10000.0f, 2048, false);
  // Llama 3.2's config.json: rope_scaling {rope_type llama3, factor 32, low_freq_factor 1,
  // high_freq_factor 4, original_max_position_embeddings 8192}.
  const Llama3RopeScaling llama32_rope{32.0f, 1.0f, 4.0f, 8192};
  if (name == "llama-3.2-1b") {
    LlamaConfig c = make(128256, 2048, 16, 32, 8, 8192, 500000.0f, 131072, true);
    c.rope_llama3 = llama32_rope;
    return c;
  }
  if (name == "llama-3.2-3b") {
    LlamaConfig c = make(128256, 3072, 28, 24, 8, 8192, 500000.0f, 131072, true);
    c.rope_llama3 = llama32_rope;
    return c;
  }
  if (name == "llama-3-8b") return make(128256, 4096, 32, 32, 8, 14336, 500000.0f, 8192, false);
  if (name == "gemma3-270m") {  // google/gemma-3-270m's config.json
    LlamaConfig c = make(262144, 640, 18, 4, 1, 2048, 1000000.0f, 32768, true);
    c.architecture = "gemma3";
    c.head_dim = 256;
    c.n_rot = 256;
    c.rms_eps = 1e-6f;
    apply_gemma3_seams(c, 512);
    return c;
  }
  return std::nullopt;
}

std::vector<std::string> LlamaConfig::named_shapes() {
  return {"smollm2-135m", "smollm2-360m", "tinyllama-1.1b", "llama-3.2-1b", "llama-3.2-3b",
          "llama-3-8b", "gemma3-270m"};
}

void LlamaConfig::validate() const {
  auto positive = [](int32_t v, const char* what) {
    if (v <= 0) throw std::invalid_argument(std::string("model config: ") + what + " must be positive");
  };
  positive(n_vocab, "n_vocab");
  positive(n_embd, "n_embd (embedding_length)");
  positive(n_layer, "n_layer (block_count)");
  positive(n_head, "n_head (attention.head_count)");
  positive(n_head_kv, "n_head_kv (attention.head_count_kv)");
  positive(head_dim, "head_dim");
  positive(n_ff, "n_ff (feed_forward_length)");
  positive(n_rot, "n_rot (rope.dimension_count)");
  if (n_head % n_head_kv != 0) {
    throw std::invalid_argument("model config: head_count " + std::to_string(n_head) +
                                " is not a multiple of head_count_kv " + std::to_string(n_head_kv));
  }
  // q_dim() and kv_dim() multiply in int32; n_head_kv divides n_head, so q_dim is the larger
  // (an overflow here was signed-integer UB reachable from a model file: tests/fuzz/gguf_fuzz).
  if (int64_t{n_head} * head_dim > INT32_MAX) {
    throw std::invalid_argument("model config: head_count " + std::to_string(n_head) +
                                " x head_dim " + std::to_string(head_dim) + " is too large");
  }
  if (n_rot % 2 != 0 || n_rot > head_dim) {
    throw std::invalid_argument("model config: rope.dimension_count " + std::to_string(n_rot) +
                                " must be even and at most head_dim " + std::to_string(head_dim));
  }
  // Finite too: a float64 1e300 in a GGUF file becomes inf as a float (found by
  // tests/fuzz/gguf_fuzz), and RoPE or RMSNorm would then compute with it.
  auto positive_finite = [](float v) { return std::isfinite(v) && v > 0.0f; };
  if (!positive_finite(rope_freq_base)) {
    throw std::invalid_argument("model config: rope.freq_base must be positive and finite");
  }
  if (!positive_finite(rope_freq_scale)) {
    throw std::invalid_argument("model config: the RoPE scaling factor must be positive and finite");
  }
  if (!positive_finite(rms_eps)) {
    throw std::invalid_argument("model config: rms epsilon must be positive and finite");
  }
  if (!positive_finite(embedding_scale)) {
    throw std::invalid_argument("model config: the embedding scale must be positive and finite");
  }
  if (!positive_finite(rope_freq_base_sliding)) {
    throw std::invalid_argument("model config: rope.freq_base_swa must be positive and finite");
  }
  if (sliding_window < 0 ||
      (sliding_window > 0 && sliding_layers.size() != static_cast<size_t>(n_layer))) {
    throw std::invalid_argument("model config: the sliding window needs one flag per layer");
  }
  if (rope_llama3) {
    const Llama3RopeScaling& s = *rope_llama3;
    if (!(s.factor > 0.0f) || !(s.high_freq_factor > s.low_freq_factor) ||
        !(s.low_freq_factor > 0.0f) || s.original_context_length <= 0) {
      throw std::invalid_argument(
          "model config: llama3 RoPE scaling needs factor > 0, "
          "high_freq_factor > low_freq_factor > 0 and a positive original context length");
    }
  }
}

std::vector<float> llama3_rope_freq_factors(int32_t n_rot, float freq_base,
                                            const Llama3RopeScaling& s) {
  constexpr double kPi = 3.14159265358979323846;
  const double old_ctx = s.original_context_length;
  const double low_freq_wavelen = old_ctx / s.low_freq_factor;
  const double high_freq_wavelen = old_ctx / s.high_freq_factor;
  std::vector<float> factors(static_cast<size_t>(n_rot / 2));
  for (int32_t i = 0; i < n_rot / 2; ++i) {
    const double freq = 1.0 / std::pow(static_cast<double>(freq_base), 2.0 * i / n_rot);
    const double wavelen = 2.0 * kPi / freq;
    double f;
    if (wavelen < high_freq_wavelen) {
      f = 1.0;
    } else if (wavelen > low_freq_wavelen) {
      f = s.factor;
    } else {
      const double smooth =
          (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = 1.0 / ((1.0 - smooth) / s.factor + smooth);
    }
    factors[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return factors;
}

}  // namespace troupe::model
