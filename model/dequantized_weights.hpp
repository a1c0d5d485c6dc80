// The same model with every matrix decoded to one floating type (F16, BF16 or F32): what the
// CUDA backend computes with after its start-up conversion, as a LlamaWeights the CPU backend
// can run too. The control of the CUDA parity tests: GPU(model) against CPU(model as F16)
// isolates the device's arithmetic from the quantized CPU kernels, and CPU(model) against
// CPU(model as F16) measures what a type's own quantized arithmetic moves the logits by.
//
// Thread-safety: a pure function (it allocates); the result is immutable and owns its storage
// (norms, biases and rope_freqs stay views into `w`, which the result keeps alive).
#pragma once

#include "model/llama_weights.hpp"
#include "model/tensor_type.hpp"

namespace troupe::model {

// Every 2-D weight (the layers' projections, token_embd, and output when untied) decoded with
// the reference dequantizer (model/quants/dequantize.hpp) and rounded to nearest-even into
// `target`. A tied model stays tied. Throws std::invalid_argument for a target other than F16,
// BF16 or F32, or a weight type the reference dequantizer cannot decode.
LlamaWeights dequantized_copy(const LlamaWeights& w, TensorType target);

}  // namespace troupe::model
