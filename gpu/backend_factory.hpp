// Chooses and builds the step backend for a model: CUDA when asked for (or `auto`) and a device
// is usable, else the CPU backend.
//
// Thread-safety: call from the wiring thread at start-up.
#pragma once

#include <memory>
#include <string>

#include "gpu/backend.hpp"
#include "model/gguf.hpp"

namespace troupe::gpu {

enum class BackendRequest { kAuto, kCpu, kCuda };

struct BackendOptions {
  BackendRequest request = BackendRequest::kAuto;
  int cpu_threads = 0;           // 0: every core
  int32_t num_blocks = 0;        // KV blocks; 0: from kv_memory_bytes
  int64_t kv_memory_bytes = 256ll << 20;
  int32_t block_size = 16;
};

struct BuiltBackend {
  std::unique_ptr<Backend> backend;
  std::string note;  // why this backend was chosen (logged at start)
};

// Throws std::runtime_error (naming the tensor or setting) when the model cannot run.
BuiltBackend make_backend(std::shared_ptr<const model::GgufFile> file, const BackendOptions& options);

}  // namespace troupe::gpu
