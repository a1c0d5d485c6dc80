// Hyper-parameters of a llama-family model (llama: SmolLM2, TinyLlama, Llama 2/3, Mistral; qwen2
// through the QKV-bias and NEOX-RoPE seams), read from GGUF metadata or a named dummy shape.
//
// Thread-safety: a plain value; copy freely.
#pragma once

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
  float rms_eps = 1e-5f;
  bool tied_output = false;    // no output.weight: logits use token_embd
  bool qkv_bias = false;       // qwen2: attn_q/k/v carry a bias vector

  int32_t q_dim() const { return n_head * head_dim; }
  int32_t kv_dim() const { return n_head_kv * head_dim; }
  float attention_scale() const;

  // Reads `{arch}.*` keys. Throws GgufError naming a missing/invalid key, or an unsupported
  // architecture or RoPE scaling.
  static LlamaConfig from_gguf(const GgufFile& file);

  // A known architecture shape for dummy weights: "smollm2-135m", "smollm2-360m",
  // "tinyllama-1.1b", "llama-3.2-1b", "llama-3.2-3b", "llama-3-8b". nullopt when unknown.
  static std::optional<LlamaConfig> named_shape(std::string_view name);
  static std::vector<std::string> named_shapes();

  // Internal consistency (positive sizes, n_head % n_head_kv == 0, even n_rot <= head_dim);
  // throws std::invalid_argument naming the field.
  void validate() const;
};

}  // namespace troupe::model
