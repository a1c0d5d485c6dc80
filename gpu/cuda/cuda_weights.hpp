// The model's weights on the device, uploaded once at start-up: GGUF matrices dequantized to the
// compute type (F16, or BF16 for BF16 models), Q|K|V and gate|up fused into one matrix each, the
// norms as F32, the token embedding kept raw (gathered per step).
//
// Thread-safety: upload_weights() from the backend's constructor only; the result is read-only
// afterwards and read by the thread that enqueues steps.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "gpu/cuda/device_allocations.hpp"
#include "gpu/cuda/kernel_types.cuh"
#include "model/llama_weights.hpp"

namespace troupe::gpu::cuda {

struct DeviceLayerWeights {
  void* qkv = nullptr;      // [q_dim + 2 kv_dim][n_embd]
  void* wo = nullptr;       // [n_embd][q_dim]
  void* gate_up = nullptr;  // [2 n_ff][n_embd]
  void* down = nullptr;     // [n_embd][n_ff]
  float* attn_norm = nullptr;
  float* ffn_norm = nullptr;
  // gemma3 only (LlamaConfig::qk_norm, post_norms), nullptr otherwise: [head_dim] per-head Q and
  // K norms, and the [n_embd] norms of the attention and FFN outputs before each residual add.
  float* q_norm = nullptr;
  float* k_norm = nullptr;
  float* post_attn_norm = nullptr;
  float* post_ffn_norm = nullptr;
};

struct DeviceWeights {
  std::vector<DeviceLayerWeights> layers;
  void* embd_raw = nullptr;
  WeightType embd_type = WeightType::kF32;
  int64_t embd_row_bytes = 0;
  float* output_norm = nullptr;
  float* rope_freqs = nullptr;  // [n_rot / 2] RoPE frequency divisors, or nullptr (none)
  void* output = nullptr;       // [n_vocab][n_embd]
  // GEGLU models (gemma3): the CPU's fp16 GELU table (65,536 words, geglu_mul.cuh), else nullptr.
  uint16_t* gelu_table = nullptr;
  int64_t gemm_bytes = 0;       // device bytes of the GEMM weights
};

// Uploads every weight into buffers recorded in `allocations` (freed by the caller, also when
// this throws) and waits for the conversions on `stream`. Throws std::invalid_argument for an
// unsupported tensor type and CudaError for a device failure.
DeviceWeights upload_weights(const model::LlamaWeights& w, ActType act, cudaStream_t stream,
                             DeviceAllocations& allocations);

}  // namespace troupe::gpu::cuda
