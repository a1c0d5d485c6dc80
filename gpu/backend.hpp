// The Backend interface: weights and KV memory on one device, and one forward step at a time.
// Implementations: gpu/cpu/ (the reference and embedded default) and gpu/cuda/.
//
// Thread-safety: owned by the gpu-worker actor and called from its executor only. `launch`
// returns at once; the completion runs exactly once, on a thread of the backend's own (a compute
// thread on CPU, an event-poll thread on CUDA) — the caller re-posts it to its executor. gpu/
// does not depend on Asio, so completion is a plain callback here.
#pragma once

#include <cstdint>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "gpu/kv_dtype.hpp"
#include "gpu/step.hpp"

namespace troupe::gpu {

// Shape of the paged KV memory a backend allocated; the kv-cache actor's BlockPool mirrors it.
struct KvCacheGeometry {
  int32_t num_blocks = 0;
  int32_t block_size = 16;  // tokens per block
  int64_t bytes = 0;        // device (or host) memory the KV blocks take
  // KV groups (gpu/kv_groups.hpp): every sequence holds one block table per group; groups 1..
  // keep only the last sliding_window tokens' pages.
  int32_t num_kv_groups = 1;
  int32_t sliding_window = 0;
  int32_t layers_per_group = 0;  // layers a block (page) holds
  KvDtype dtype = KvDtype::kF16;  // the number format of K and V (gpu/kv_dtype.hpp)
};

// The paged KV memory as bytes in this process, for moving KV between servers (disaggregated
// prefill/decode): one block of one layer's K (kv 0) or V (kv 1) is the contiguous run of
// block_bytes at layer * layer_stride + kv * kv_stride + block * block_bytes from base.
struct KvHostMemory {
  std::byte* base = nullptr;
  int64_t bytes = 0;
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;
  int32_t num_blocks = 0;
  int64_t block_bytes = 0;
  int64_t kv_stride = 0;
  int64_t layer_stride = 0;
  KvDtype dtype = KvDtype::kF16;  // two servers exchange KV only in the same format
};

// Where a step's time went inside the backend, in milliseconds of wall time on its compute
// thread (the scheduler's account of a served run, issue 42). A backend that does not measure
// its phases leaves them 0, and the scheduler books the whole step as the backend's other time.
struct StepTimings {
  double layers_ms = 0;          // embeddings and every layer, for every token of the step
  double logits_ms = 0;          // the final norm and vocabulary projection of the sampled rows
  double sampling_ms = 0;        // penalties, masks, top-k/p, logprobs, the draw
  double prompt_outputs_ms = 0;  // prompt logprobs and hidden rows (scores, embeddings)
};

// A step either produced its tokens, failed as a whole (device error), or was given up on the
// scheduler's request (StepInterrupt); scarcity never gets here — the scheduler only plans
// steps that fit.
struct StepOutcome {
  StepResult result;
  std::string error;         // empty on success
  bool interrupted = false;  // given up: no tokens, and the KV it wrote is to be recomputed
  StepTimings timings;
  bool ok() const { return error.empty(); }
};

class Backend {
 public:
  using Completion = std::function<void(StepOutcome)>;

  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;  // "cpu", "cuda"
  virtual KvCacheGeometry kv_geometry() const = 0;
  // The KV memory when it is host memory a transport can register (the CPU backend); nullopt
  // otherwise (CUDA: device memory is to be staged through pinned host buffers, not yet built).
  // Who writes into it outside a step must know the blocks are in no step (the scheduler
  // schedules a sequence only once its pulled KV is resident).
  virtual std::optional<KvHostMemory> kv_host_memory() { return std::nullopt; }

  // Whether launch() verifies draft tokens (SequenceSlice::num_draft_tokens > 0). A backend
  // that does not is never sent drafts: the engine turns speculative decoding off for it.
  virtual bool supports_speculation() const { return false; }

  // Whether launch() computes prompt outputs (SequenceSlice scores and hidden rows: embeddings
  // and prompt logprobs). The engine refuses those requests, naming the backend, when not.
  virtual bool supports_prompt_outputs() const { return false; }

  // Whether launch() honours StepBatch::interrupt (gpu/step.hpp). The engine turns first-token
  // interrupts off for a backend that does not: the scheduler would wake for nothing.
  virtual bool supports_interrupts() const { return false; }

  // Enqueues one step; returns at once. `done` runs exactly once when the step's results are
  // ready (after the device's completion event on CUDA).
  virtual void launch(StepBatch batch, Completion done) = 0;
};

}  // namespace troupe::gpu
