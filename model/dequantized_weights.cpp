// Matrices decoded to one floating type (see dequantized_weights.hpp).
#include "model/dequantized_weights.hpp"

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/fp16.hpp"
#include "model/quants/dequantize.hpp"

namespace troupe::model {
namespace {

// The decoded matrices and the weights they came from (whose norms the copy still views).
struct Storage {
  LlamaWeights source;
  std::vector<std::unique_ptr<std::byte[]>> matrices;
};

WeightView decoded(const WeightView& v, TensorType target, Storage& storage) {
  const int64_t n = v.num_inputs;
  const size_t elem = target == TensorType::kF32 ? 4 : 2;
  auto bytes = std::make_unique<std::byte[]>(static_cast<size_t>(n * v.num_outputs) * elem);
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t r = 0; r < v.num_outputs; ++r) {
    quants::dequantize_row(v.type, v.row(r), n, row.data());
    std::byte* out = bytes.get() + static_cast<size_t>(r * n) * elem;
    for (int64_t j = 0; j < n; ++j) {
      if (target == TensorType::kF32) {
        std::memcpy(out + 4 * j, &row[j], 4);
      } else {
        const uint16_t h = target == TensorType::kF16 ? fp32_to_fp16(row[j]) : fp32_to_bf16(row[j]);
        std::memcpy(out + 2 * j, &h, 2);
      }
    }
  }
  WeightView d = v;
  d.type = target;
  d.data = bytes.get();
  d.num_bytes = static_cast<uint64_t>(n * v.num_outputs) * elem;
  storage.matrices.push_back(std::move(bytes));
  return d;
}

}  // namespace

LlamaWeights dequantized_copy(const LlamaWeights& w, TensorType target) {
  if (target != TensorType::kF16 && target != TensorType::kBF16 && target != TensorType::kF32) {
    throw std::invalid_argument("dequantized_copy: target must be F16, BF16 or F32, not " +
                                std::string(tensor_type_name(target)));
  }
  auto storage = std::make_shared<Storage>(Storage{w, {}});
  std::vector<LlamaLayerWeights> layers = w.layers();
  for (LlamaLayerWeights& l : layers) {
    for (WeightView* v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      *v = decoded(*v, target, *storage);
    }
  }
  const WeightView embd = decoded(w.token_embd(), target, *storage);
  std::optional<WeightView> output;
  if (!w.config().tied_output) output = decoded(w.output(), target, *storage);
  return LlamaWeights::from_views(w.config(), embd, w.output_norm(), std::move(output),
                                  std::move(layers), storage, w.rope_freqs());
}

}  // namespace troupe::model
