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

struct DummyWeightsSpec {
  std::string shape = "smollm2-135m";  // LlamaConfig::named_shape
  TensorType type = TensorType::kQ4_0;  // F32, F16, BF16, Q8_0, Q4_0 or Q4_1 (2-D weights)
  uint64_t seed = 0;
};

// Throws std::invalid_argument for an unknown shape or unsupported type. Norms are F32 near 1;
// matrices have entries of standard deviation ~0.02 (so activations stay in range). A config
// with rope_llama3 (the llama-3.2 shapes) also gets rope_freqs.weight, computed as llama.cpp's
// converter does, so the RoPE-factor path runs at those shapes.
LlamaWeights make_dummy_weights(const DummyWeightsSpec& spec);

// Same, with an explicit config (for small test shapes).
LlamaWeights make_dummy_weights(const LlamaConfig& config, TensorType type, uint64_t seed);

}  // namespace troupe::model
