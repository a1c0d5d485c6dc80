// The CPU backend: the reference implementation of gpu::Backend and the embedded default.
// Owns the packed weights, the paged fp16 KV memory, a compute thread and a ThreadPool over the
// machine's cores.
//
//   auto file = std::make_shared<const model::GgufFile>(model::GgufFile::open(path));
//   auto backend = CpuBackend::from_gguf(file, CpuBackendConfig{});
//   StepResult r = backend->run_step(batch);              // synchronous (tests, benchmarks)
//   backend->launch(std::move(batch), [](StepOutcome o) { ... });  // async, completion on the
//                                                                   // backend's compute thread
// Thread-safety: launch() from the gpu-worker's executor; run_step() from any one thread at a
// time. Steps run one at a time in submission order; launch() and run_step() may be mixed (they
// serialize on the compute lock).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "gpu/backend.hpp"
#include "gpu/backend_defaults.hpp"
#include "gpu/cpu/cpu_features.hpp"
#include "gpu/cpu/forward.hpp"
#include "gpu/cpu/sampler.hpp"
#include "gpu/cpu/thread_pool.hpp"
#include "model/gguf.hpp"
#include "model/llama_weights.hpp"

namespace troupe::gpu::cpu {

struct CpuBackendConfig {
  int num_threads = 0;                       // compute threads in all; 0: every core
  int32_t num_blocks = 0;                    // KV blocks; 0: from kv_memory_bytes
  int64_t kv_memory_bytes = defaults::kCpuKvMemoryBytes;  // used when num_blocks == 0
  int32_t block_size = defaults::kBlockSize;              // tokens per KV block
  std::optional<IsaLevel> isa;               // default: default_isa() (TROUPE_CPU_ISA caps it)
  // Prompt tokens' attention (attention_tiled_bf16.hpp): exact (llama.cpp's bits) or bf16.
  PrefillAttentionPrecision prefill_attention = PrefillAttentionPrecision::kExact;
  KvDtype kv_dtype = KvDtype::kF16;          // f16 or q8_0 (the block count follows it)
  ForwardObserver observer;                  // parity probes and tests; empty normally
};

class CpuBackend final : public Backend {
 public:
  // Repacks the weights and allocates KV. Throws std::invalid_argument for unsupported tensor
  // types or a bad config.
  CpuBackend(model::LlamaWeights weights, const CpuBackendConfig& config);
  ~CpuBackend() override;

  // Loads and validates the weights from `file` (kept alive by the backend).
  static std::unique_ptr<CpuBackend> from_gguf(std::shared_ptr<const model::GgufFile> file,
                                               const CpuBackendConfig& config);

  std::string_view name() const override { return "cpu"; }
  bool supports_speculation() const override { return true; }
  bool supports_interrupts() const override { return true; }
  bool supports_prompt_outputs() const override { return true; }
  KvCacheGeometry kv_geometry() const override;
  std::optional<KvHostMemory> kv_host_memory() override;
  void launch(StepBatch batch, Completion done) override;

  // Runs one step on the calling thread (plus the pool). Throws std::invalid_argument for a
  // malformed batch. A step its interrupt gave up returns no tokens (launch() reports it as
  // StepOutcome::interrupted).
  StepResult run_step(const StepBatch& batch);

  // The logits of the sampling rows ([num sampling seqs][n_vocab], seqs order), without
  // sampling: what batch-invariance tests and the CUDA comparison read.
  std::vector<float> compute_logits(const StepBatch& batch);

  const model::LlamaConfig& model_config() const { return forward_.config(); }
  IsaLevel isa() const { return isa_; }
  int num_threads() const { return pool_.num_threads(); }
  int64_t packed_weight_bytes() const { return forward_.packed_weight_bytes(); }

 private:
  // Never an error (exceptions are the caller's to turn into one); interrupted when the batch's
  // interrupt was honoured.
  StepOutcome run_locked(const StepBatch& batch);
  // The step's prompt outputs (scores, hidden rows) after its forward pass and sampling.
  void prompt_outputs(const StepBatch& batch, StepResult& result);
  void dispatcher_loop();

  IsaLevel isa_;
  LlamaForward forward_;
  ThreadPool pool_;
  std::vector<Sampler> samplers_;  // one per pool thread
  std::vector<float> score_logits_;  // a chunk of scored rows' logits
  std::mutex compute_mutex_;

  struct Job {
    StepBatch batch;
    Completion done;
  };
  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::thread dispatcher_;
};

}  // namespace troupe::gpu::cpu
