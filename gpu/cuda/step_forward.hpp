// The step's forward pass on the device: embedding gather, then per layer RMSNorm -> QKV GEMM ->
// RoPE -> paged KV write -> paged attention -> output GEMM (+residual) -> RMSNorm -> gate|up GEMM
// -> SiLU*up -> down GEMM (+residual); the final norm and the vocabulary GEMM for the sampling
// rows only. Everything is enqueued on one stream; nothing here waits for the device.
//
// gemma3 (LlamaConfig's Gemma seams), as the CPU twin (gpu/cpu/forward.cpp) does it: embeddings
// times embedding_scale; per-head Q and K norms before RoPE; each layer's own RoPE base (the
// sliding layers', without rope_freqs factors); Q times query_scale before its fp16 rounding;
// sliding-window attention in the sliding layers, each KV group (gpu/kv_groups.hpp) with its own
// block tables and cache slots; the output and down projections normed (post norms) before the
// residual add; GELU-tanh instead of SiLU.
//
// With an observer (parity probes) each observed op's output is copied to the host in llama.cpp's
// names (inp_embd, attn_norm, qkv, qk_rope, kqv_out, ffn_inp, ffn_norm, gate_up, ffn_swiglu,
// l_out, result_norm), which makes the step synchronous.
//
// Thread-safety: enqueue_forward_pass() from the thread that calls launch() / compute_logits(),
// one step at a time (the scratch buffers are shared by every step).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include <cublas_v2.h>

#include "gpu/cuda/cuda_weights.hpp"
#include "gpu/cuda/kernel_types.cuh"
#include "gpu/cuda/kv_memory.hpp"
#include "gpu/cuda/step_inputs.hpp"
#include "gpu/forward_observer.hpp"
#include "gpu/kv_groups.hpp"
#include "model/llama_config.hpp"

namespace troupe::gpu::cuda {

// Scratch, sized for max_num_batched_tokens tokens (T) and max_num_seqs sampling rows (S).
struct ForwardScratch {
  float* x = nullptr;          // residual stream [T][E]
  void* h = nullptr;           // normed activations [T][E]
  float* qkv = nullptr;        // [T][Q + 2 KV]
  void* attn = nullptr;        // [T][Q]
  float* gate_up = nullptr;    // [T][2F]
  float* tmp = nullptr;        // [T][E]: a projection's output before its post norm (post_norms)
  void* ff = nullptr;          // [T][F]
  float* logits = nullptr;     // [S][V]
  float* workspace = nullptr;  // [S][V]
};

// What a forward pass reads and writes, owned by the backend.
struct ForwardContext {
  const model::LlamaConfig* model = nullptr;
  int32_t block_size = 0;
  ActType act = ActType::kF16;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  const DeviceWeights* weights = nullptr;
  const KvCache* kv_cache = nullptr;
  const KvGroups* kv_groups = nullptr;  // which group's tables and slots each layer uses
  const ForwardScratch* scratch = nullptr;
  // Parity probes only (gpu/forward_observer.hpp): when set, the pass synchronizes the stream
  // after each observed op and hands its output to the observer as floats.
  const ForwardObserver* observer = nullptr;
};

// Enqueues the forward pass of `num_tokens` tokens; the logits of the `num_rows` sampling rows
// land in scratch->logits.
void enqueue_forward_pass(const ForwardContext& ctx, const DeviceStepInputs& in,
                          int32_t num_tokens, int32_t num_rows, int32_t max_blocks_per_seq);

}  // namespace troupe::gpu::cuda
