// Chooses and builds the step backend for a model. `cuda` builds the CUDA backend when a device is
// usable and every matrix type of the model and the KV format are proven on a GPU
// (gpu/cuda_proven_types.hpp), and refuses the model by tensor and type (or the setting) otherwise; `auto` takes the CUDA backend only for such a
// model, else the CPU backend, and says why in the log. TROUPE_CUDA_UNPROVEN_TYPES=allow (read
// here only) lets `cuda` run unproven types: for bench/device_check.sh, which proves them.
//
// Thread-safety: call from the wiring thread at start-up.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gpu/backend.hpp"
#include "gpu/backend_defaults.hpp"
#include "gpu/cpu/attention_tiled_bf16.hpp"
#include "model/gguf.hpp"
#include "model/llama_weights.hpp"

namespace troupe::gpu {

enum class BackendRequest { kAuto, kCpu, kCuda };

struct BackendOptions {
  BackendRequest request = BackendRequest::kAuto;
  int cpu_threads = 0;           // 0: every core
  cpu::PrefillAttentionPrecision cpu_prefill_attention = cpu::PrefillAttentionPrecision::kExact;
  int32_t num_blocks = 0;        // KV blocks; 0: from kv_memory_bytes
  int64_t kv_memory_bytes = defaults::kCpuKvMemoryBytes;
  int32_t block_size = defaults::kBlockSize;
  KvDtype kv_dtype = KvDtype::kF16;  // the KV cache's format (cache.kv_dtype)
  // CUDA: share of device memory for weights + scratch + KV, and the step limits its scratch
  // buffers must cover (the scheduler's max_num_batched_tokens / max_num_seqs).
  double gpu_memory_utilization = defaults::kGpuMemoryUtilization;
  int32_t max_num_batched_tokens = defaults::kMaxNumBatchedTokens;
  int32_t max_num_seqs = defaults::kMaxNumSeqs;
  // Disaggregated prefill/decode: a backend whose KV is not host memory keeps a pinned host
  // mirror for the KV transport (CUDA), capped at this many bytes.
  bool kv_host_mirror = false;
  int64_t max_kv_host_mirror_bytes = 16ll << 30;
};

// Which backend a request gets, decided from facts alone (testable without a device).
enum class BackendVerdict { kCpu, kCuda, kRefuse };
struct BackendDecision {
  BackendVerdict verdict = BackendVerdict::kCpu;
  std::string note;  // the log line, or the refusal's message
};

// `cuda_devices`: names of the usable devices (first is used); `cuda_compiled`: this binary has
// the CUDA backend; `probe_status`: why no device was found; `allow_unproven`: the environment's
// override; `kv_dtype`: the KV cache's format — q8_0 is the CPU backend's (`auto` then takes the
// CPU, `cuda` is refused by name), fp8_e4m3 the CUDA backend's, proven like a weight type and
// refused by name wherever the CPU backend would get it. Pure.
BackendDecision decide_backend(BackendRequest request, bool cuda_compiled,
                               const std::vector<std::string>& cuda_devices,
                               const std::string& probe_status, const model::LlamaWeights& weights,
                               bool allow_unproven, KvDtype kv_dtype = KvDtype::kF16);

struct BuiltBackend {
  std::unique_ptr<Backend> backend;
  std::string note;  // why this backend was chosen (logged at start)
};

// Throws std::runtime_error (naming the tensor or setting) when the model cannot run, or when
// decide_backend() refuses it.
BuiltBackend make_backend(std::shared_ptr<const model::GgufFile> file, const BackendOptions& options);

}  // namespace troupe::gpu
