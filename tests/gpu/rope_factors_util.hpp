// Test helper: the same weights with a chosen rope_freqs.weight (RoPE frequency factors), so CPU
// and CUDA tests can compare factor sets on otherwise identical models.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "model/llama_weights.hpp"

namespace troupe::gpu::testing {

// `w` under config `c` with rope_freqs.weight = factors (none when empty); the factors live as
// long as the returned weights (w's storage too).
inline model::LlamaWeights with_rope_factors(const model::LlamaWeights& w, model::LlamaConfig c,
                                             std::vector<float> factors) {
  struct Holder {
    model::LlamaWeights base;
    std::vector<float> factors;
  };
  auto holder = std::make_shared<Holder>(Holder{w, std::move(factors)});
  std::optional<model::WeightView> rope_freqs;
  if (!holder->factors.empty()) {
    model::WeightView v;
    v.name = "rope_freqs.weight";
    v.type = model::TensorType::kF32;
    v.num_inputs = static_cast<int64_t>(holder->factors.size());
    v.data = reinterpret_cast<const std::byte*>(holder->factors.data());
    v.num_bytes = 4 * holder->factors.size();
    rope_freqs = v;
  }
  std::optional<model::WeightView> output;
  if (!c.tied_output) output = w.output();
  return model::LlamaWeights::from_views(c, w.token_embd(), w.output_norm(), output, w.layers(),
                                         holder, rope_freqs);
}

}  // namespace troupe::gpu::testing
