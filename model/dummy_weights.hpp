// `dummy` weights (vLLM's --load-format dummy): a named architecture shape filled with seeded
// random weights of one type, owned in memory, behind the same LlamaWeights view as a GGUF file.
// For benchmarks at real sizes without downloads; the outputs are meaningless text.
//
// Thread-safety: make_dummy_weights is a pure function (it allocates); the result is immutable.
#pragma once

#include <cstdint>
#include <string>

#include "model/llama_weights.hpp"
#include "model/tensor_type.hpp"

namespace troupe::model {

// How matrix types are chosen: all `type`, or llama.cpp's Q4_K_M recipe (Q6_K for the output
// matrix (token_embd when tied) and for attn_v / ffn_down of the layers llama.cpp's use_more_bits
// picks, Q4_K elsewhere; `type` is ignored).
enum class DummyMix { kUniform, kQ4_K_M };

struct DummyWeightsSpec {
  std::string shape = "smollm2-135m";  // LlamaConfig::named_shape
  // F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K or Q6_K (2-D weights). K-quant
  // rows must be multiples of 256: a matrix whose rows are not (SmolLM2's 576) falls back as
  // llama.cpp's quantizer does: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0 (F16 if not % 32).
  TensorType type = TensorType::kQ4_0;
  uint64_t seed = 0;
  DummyMix mix = DummyMix::kUniform;
};

// Throws std::invalid_argument for an unknown shape or unsupported type. Norms are F32 near 1;
// matrices have entries of standard deviation ~0.02 (so activations stay in range). A config
// with rope_llama3 (the llama-3.2 shapes) also gets rope_freqs.weight, computed as llama.cpp's
// converter does, so the RoPE-factor path runs at those shapes.
LlamaWeights make_dummy_weights(const DummyWeightsSpec& spec);

// Same, with an explicit config (for small test shapes).
LlamaWeights make_dummy_weights(const LlamaConfig& config, TensorType type, uint64_t seed,
                                DummyMix mix = DummyMix::kUniform);

}  // namespace troupe::model
