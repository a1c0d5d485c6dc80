// A validated view of every tensor a llama-family forward pass reads: from a GGUF mapping (no
// copy) or from owned memory (dummy weights, see dummy_weights.hpp). Backends repack from here.
//
// Thread-safety: immutable after construction; read from any thread. Views stay valid while the
// LlamaWeights (or a copy: copies share the storage) lives, and, for from_gguf(const GgufFile&),
// while the GgufFile lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/gguf.hpp"
#include "model/llama_config.hpp"
#include "model/tensor_type.hpp"

namespace troupe::model {

// One weight: a matrix of num_outputs rows of num_inputs elements (GGUF dims [num_inputs,
// num_outputs]), or a vector (num_outputs == 1).
struct WeightView {
  std::string name;
  TensorType type = TensorType::kF32;
  int64_t num_inputs = 0;   // dims[0], contiguous
  int64_t num_outputs = 1;  // dims[1]
  const std::byte* data = nullptr;
  uint64_t num_bytes = 0;

  const std::byte* row(int64_t r) const {
    return data + static_cast<size_t>(r) * row_bytes(type, static_cast<uint64_t>(num_inputs));
  }
  const float* as_f32() const { return reinterpret_cast<const float*>(data); }
};

struct LlamaLayerWeights {
  WeightView attn_norm;  // [n_embd] F32
  WeightView wq, wk, wv, wo;
  std::optional<WeightView> bq, bk, bv;  // qwen2 only, F32
  WeightView ffn_norm;   // [n_embd] F32
  WeightView w_gate, w_up, w_down;
  // gemma3 only (LlamaConfig::qk_norm, post_norms), F32: [head_dim] per-head Q/K norms, and the
  // [n_embd] norms of the attention and feed-forward outputs before their residual adds.
  std::optional<WeightView> q_norm, k_norm, post_attn_norm, post_ffn_norm;
};

class LlamaWeights {
 public:
  // Views into `file` (which must outlive the result). Throws GgufError naming the first
  // missing tensor, or the tensor and expected vs actual type/shape.
  static LlamaWeights from_gguf(const GgufFile& file);
  // Same, keeping the file alive with the weights.
  static LlamaWeights from_gguf(std::shared_ptr<const GgufFile> file);

  // Views into caller-provided storage, kept alive by `storage` (dummy weights).
  static LlamaWeights from_views(LlamaConfig config, WeightView token_embd, WeightView output_norm,
                                 std::optional<WeightView> output,
                                 std::vector<LlamaLayerWeights> layers,
                                 std::shared_ptr<const void> storage,
                                 std::optional<WeightView> rope_freqs = std::nullopt);

  const LlamaConfig& config() const { return config_; }
  const WeightView& token_embd() const { return token_embd_; }
  const WeightView& output_norm() const { return output_norm_; }
  // The output projection: output.weight, or token_embd when tied.
  const WeightView& output() const { return output_ ? *output_ : token_embd_; }
  const std::vector<LlamaLayerWeights>& layers() const { return layers_; }
  // rope_freqs.weight (Llama 3.1+, llama.cpp's LLM_TENSOR_ROPE_FREQS): F32 [n_rot / 2], one
  // divisor per rotated pair: theta_i = pos * freq_scale * base^(-2i / n_rot) / factor_i.
  const std::optional<WeightView>& rope_freqs() const { return rope_freqs_; }
  // The same values as floats; empty when the model has no rope_freqs (plain RoPE).
  std::span<const float> rope_freq_factors() const;
  // Name of the type most 2-D weights use ("Q4_1"), for logs.
  std::string main_type_name() const;

  // Checks every view against the config (types with known block traits, 2-D shapes, F32
  // norms, rope_freqs F32 [n_rot / 2] of positive finite values). Throws GgufError naming the
  // tensor.
  void validate() const;

 private:
  LlamaConfig config_;
  WeightView token_embd_, output_norm_;
  std::optional<WeightView> output_;
  std::optional<WeightView> rope_freqs_;
  std::vector<LlamaLayerWeights> layers_;
  std::shared_ptr<const void> storage_;
};

}  // namespace troupe::model
