// Hyper-parameters of a llama-family model (llama: SmolLM2, TinyLlama, Llama 2/3, Mistral; qwen2
// through the QKV-bias and NEOX-RoPE seams; gemma3 through the Gemma seams below), read from
// GGUF metadata or a named dummy shape.
//
// Thread-safety: a plain value; copy freely.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/gguf.hpp"

namespace troupe::model {

// How RoPE pairs dimensions: NORM rotates adjacent pairs (2i, 2i+1) (llama GGUFs, whose Q/K rows
// the converter permuted); NEOX rotates (i, i + n_rot/2) (qwen2).
enum class RopeMode { kNorm, kNeox };

// Meta's "llama3" RoPE scaling (Llama 3.1 / 3.2 config.json rope_scaling). GGUF files do not
// carry these numbers: llama.cpp's converter turns them into the rope_freqs.weight tensor (see
// llama3_rope_freq_factors). Only the named dummy shapes set them, to make the same tensor.
struct Llama3RopeScaling {
  float factor = 8.0f;  // 8 for Llama 3.1, 32 for Llama 3.2
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int32_t original_context_length = 8192;  // original_max_position_embeddings
};

// The gate activation of the feed-forward block: SiLU (SwiGLU: llama, qwen2) or GELU with the
// tanh approximation (GEGLU: gemma3).
enum class FfnActivation { kSilu, kGeluTanh };

struct LlamaConfig {
  std::string architecture = "llama";
  int32_t n_vocab = 0;
  int32_t n_embd = 0;
  int32_t n_layer = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;        // attention.key_length, else n_embd / n_head
  int32_t n_ff = 0;
  int32_t n_rot = 0;           // rope.dimension_count, else head_dim
  int32_t context_length = 0;  // n_ctx_train
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / rope.scaling.factor for linear scaling
  RopeMode rope_mode = RopeMode::kNorm;
  // Dummy weights only: generate rope_freqs.weight from this (a GGUF carries the tensor itself).
  std::optional<Llama3RopeScaling> rope_llama3;
  float rms_eps = 1e-5f;
  bool tied_output = false;    // no output.weight: logits use token_embd
  bool qkv_bias = false;       // qwen2: attn_q/k/v carry a bias vector

  // The Gemma 3 seams (llama.cpp src/models/gemma3.cpp), all off for the llama family.
  float embedding_scale = 1.0f;  // token embeddings times this (gemma3: sqrt(n_embd))
  bool qk_norm = false;          // per-head RMSNorm of Q and K (attn_q_norm/attn_k_norm) before RoPE
  bool post_norms = false;       // post_attention_norm / post_ffw_norm before each residual add
  FfnActivation ffn_activation = FfnActivation::kSilu;
  // Q is multiplied by 1/sqrt(head_dim) in f32 before attention and the scores are not scaled
  // (gemma3's graph); otherwise the scores are scaled. Same math, different rounding: llama.cpp
  // rounds the scaled Q to fp16 for the KQ product.
  bool scale_queries = false;
  // Sliding-window attention: a query at position p sees keys (p - sliding_window, p] in the
  // layers marked here (gemma3: every layer but each sixth); 0 = no sliding layers.
  int32_t sliding_window = 0;
  std::vector<bool> sliding_layers;      // [n_layer] when sliding_window > 0
  float rope_freq_base_sliding = 10000.0f;  // the RoPE base of the sliding layers (scale 1)

  int32_t q_dim() const { return n_head * head_dim; }
  int32_t kv_dim() const { return n_head_kv * head_dim; }
  // The factor on the attention scores (1 when scale_queries), and the one on Q before
  // attention (1 unless scale_queries).
  float attention_scale() const;
  float query_scale() const;
  bool is_sliding(int32_t layer) const {
    return sliding_window > 0 && sliding_layers[static_cast<size_t>(layer)];
  }
  // The first key position a query at `position` attends in `layer`.
  int32_t first_visible_key(int32_t layer, int32_t position) const {
    return is_sliding(layer) ? std::max(0, position + 1 - sliding_window) : 0;
  }
  // RoPE base and linear scale of one layer (the sliding layers have their own).
  float rope_base(int32_t layer) const;
  float rope_scale(int32_t layer) const;
  // Whether any Gemma seam is on: backends that implement only the llama family refuse these.
  bool uses_gemma_seams() const {
    return embedding_scale != 1.0f || qk_norm || post_norms ||
           ffn_activation != FfnActivation::kSilu || scale_queries || sliding_window > 0;
  }

  // Reads `{arch}.*` keys. Throws GgufError naming a missing/invalid key, or an unsupported
  // architecture or RoPE scaling.
  static LlamaConfig from_gguf(const GgufFile& file);

  // A known architecture shape for dummy weights: "smollm2-135m", "smollm2-360m",
  // "tinyllama-1.1b", "llama-3.2-1b", "llama-3.2-3b", "llama-3-8b", "gemma3-270m". nullopt when
  // unknown.
  static std::optional<LlamaConfig> named_shape(std::string_view name);
  static std::vector<std::string> named_shapes();

  // Internal consistency (positive sizes, n_head % n_head_kv == 0, even n_rot <= head_dim);
  // throws std::invalid_argument naming the field.
  void validate() const;
};

// The n_rot / 2 RoPE frequency divisors llama.cpp's converter (convert_hf_to_gguf.py,
// LlamaModel.generate_extra_tensors) writes as rope_freqs.weight for "llama3" scaling: with
// freq_i = base^(-2i / n_rot) and wavelen_i = 2 pi / freq_i,
//   wavelen_i < original_ctx / high_freq_factor  -> 1            (high frequencies kept)
//   wavelen_i > original_ctx / low_freq_factor   -> factor       (low frequencies slowed down)
//   otherwise, with smooth = (original_ctx / wavelen_i - low) / (high - low),
//                                                -> 1 / ((1 - smooth) / factor + smooth).
// Computed in double (the converter uses float32 torch tensors: the last bit may differ).
std::vector<float> llama3_rope_freq_factors(int32_t n_rot, float freq_base,
                                            const Llama3RopeScaling& s);

}  // namespace troupe::model
