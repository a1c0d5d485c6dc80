// The CUDA backend: gpu::Backend on one NVIDIA GPU (Hopper first, Ampere too).
//
//   auto backend = CudaBackend::from_gguf(file, CudaBackendConfig{});
//   backend->launch(std::move(batch), [](StepOutcome o) { ... });  // completion on the
//                                                                   // backend's poll thread
//   StepResult r = backend->run_step(batch);                      // launch + wait (tests, bench)
//
// Start-up: every weight is uploaded once; GGUF matrices (Q4_0/Q4_1/Q8_0/F16/F32) are
// dequantized on the device to F16 (BF16 models stay BF16) and Q|K|V and gate|up are fused into
// one matrix each, so a layer is four cuBLAS GEMMs. KV blocks (fp16 or FP8 E4M3, the CPU
// backend's layout) take gpu_memory_utilization of the device's memory minus what weights and scratch use.
//
// A step, all on the backend's one stream, never blocking the caller: its inputs are packed into
// a pinned host buffer and copied with one cudaMemcpyAsync; embedding gather, then per layer
// RMSNorm -> QKV GEMM -> RoPE -> paged KV write -> paged attention -> output GEMM (+residual) ->
// RMSNorm -> gate|up GEMM -> SiLU*up -> down GEMM (+residual); the final norm and the vocabulary
// GEMM for the sampling rows only; sampling on the device (the structured-output bitmask rows
// first, token_mask.cu, for constrained rows); one cudaMemcpyAsync of the sampled ids
// (and logprobs) into pinned memory; a cudaEvent recorded. A poll thread owned by the backend
// waits for each step's event in launch order and calls its completion.
//
// Not done yet (next steps, measured on the device first): CUDA graphs for decode-only steps
// (bucketed batch sizes 1..256), split-K decode attention for small batches, keeping Q4/Q8
// weights quantized with a dequantizing GEMV when that reads fewer bytes per step, cublasLt, QKV
// bias (qwen2), overlapping step N+1's host packing with step N beyond the two pinned slots.
//
// Thread-safety: launch(), run_step() and compute_logits() from one thread at a time (the
// gpu-worker's executor); completions run on the poll thread, in launch order. The header is
// plain C++ (no CUDA types): the CUDA state lives in the implementation.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpu/backend.hpp"
#include "gpu/backend_defaults.hpp"
#include "gpu/cuda/kernel_types.cuh"
#include "gpu/forward_observer.hpp"
#include "model/gguf.hpp"
#include "model/llama_weights.hpp"

namespace troupe::gpu::cuda {

struct CudaBackendConfig {
  int device = 0;
  double gpu_memory_utilization = defaults::kGpuMemoryUtilization;  // weights + scratch + KV
  int32_t num_blocks = 0;               // KV blocks; 0: as many as gpu_memory_utilization allows
  int32_t block_size = defaults::kBlockSize;
  KvDtype kv_dtype = KvDtype::kF16;     // f16 or fp8_e4m3 (kv_memory.hpp); q8_0 is refused
  // Scratch sizing: most tokens, and most sampling rows, in one step.
  int32_t max_num_batched_tokens = defaults::kMaxNumBatchedTokens;
  int32_t max_num_seqs = defaults::kMaxNumSeqs;
  std::optional<ActType> compute_type;    // default: BF16 for BF16 models, else F16
  // Disaggregated prefill/decode: keep a pinned host mirror of the KV (kv_host_mirror.hpp) that
  // the KV transport reads and writes. The KV is capped so the mirror fits the host budget.
  bool kv_host_mirror = false;
  int64_t max_kv_host_mirror_bytes = 16ll << 30;
  // Parity probes and tests (gpu/forward_observer.hpp): every observed op then synchronizes the
  // stream and copies its output to the host. Empty normally.
  ForwardObserver observer;
};

class CudaBackend final : public Backend {
 public:
  // Uploads the weights and allocates KV and scratch. Throws std::invalid_argument for an
  // unsupported model (tensor type, head_dim, QKV bias) and CudaError for a device failure
  // (no device, out of memory).
  CudaBackend(model::LlamaWeights weights, const CudaBackendConfig& config);
  ~CudaBackend() override;

  static std::unique_ptr<CudaBackend> from_gguf(std::shared_ptr<const model::GgufFile> file,
                                                const CudaBackendConfig& config);

  std::string_view name() const override { return "cuda"; }
  KvCacheGeometry kv_geometry() const override;
  // The pinned host mirror when CudaBackendConfig::kv_host_mirror (else nullopt).
  std::optional<KvHostMemory> kv_host_memory() override;
  void launch(StepBatch batch, Completion done) override;

  // launch() and wait; throws std::runtime_error with the step's error.
  StepResult run_step(const StepBatch& batch);

  // The logits of the sampling rows ([num sampling seqs][n_vocab], seqs order), without
  // sampling; synchronous. What the CPU comparison tests read.
  std::vector<float> compute_logits(const StepBatch& batch);

  const model::LlamaConfig& model_config() const;
  ActType compute_type() const;
  std::string device_name() const;
  // Device bytes of the GEMM weights, all of which a step reads (the roofline's weight term).
  int64_t gemm_weight_bytes() const;
  // Device time of the last completed step, from its first copy to its last (ms).
  float last_step_device_ms() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::gpu::cuda
