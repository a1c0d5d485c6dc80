// Embeddings (issue 37): how one input's final-norm hidden states (one per prompt position)
// become its one vector, as llama.cpp's --pooling and vLLM's pooling types name them.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace troupe::model {

enum class Pooling : uint8_t {
  kMean,  // the average over every position (llama-server --pooling mean; the default)
  kLast,  // the last position's (decoder-only embedding models: e5-mistral, Qwen3-Embedding)
  kCls,   // the first position's (BERT-style [CLS])
};

constexpr std::string_view to_string(Pooling pooling) {
  switch (pooling) {
    case Pooling::kMean: return "mean";
    case Pooling::kLast: return "last";
    case Pooling::kCls: return "cls";
  }
  return "mean";
}

constexpr std::optional<Pooling> pooling_from_string(std::string_view name) {
  if (name == "mean") return Pooling::kMean;
  if (name == "last") return Pooling::kLast;
  if (name == "cls") return Pooling::kCls;
  return std::nullopt;
}

}  // namespace troupe::model
