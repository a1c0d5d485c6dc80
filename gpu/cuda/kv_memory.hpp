// KV cache memory on the device: how many blocks gpu_memory_utilization leaves after weights and
// scratch (or CudaBackendConfig::num_blocks), allocated as one buffer split per layer into K and V
// (fp16, the CPU backend's layout).
//
// Thread-safety: allocate_kv_cache() from the backend's constructor only; the result is
// read-only afterwards.
#pragma once

#include <cstdint>
#include <vector>

#include "gpu/cuda/cuda_backend.hpp"
#include "gpu/cuda/device_allocations.hpp"
#include "model/llama_config.hpp"

namespace troupe::gpu::cuda {

struct LayerKvCache {
  void* k_cache = nullptr;
  void* v_cache = nullptr;
};

struct KvCache {
  int32_t num_blocks = 0;
  int64_t bytes = 0;
  std::vector<LayerKvCache> layers;  // [n_layer]
};

// Sizes and allocates the KV blocks; call it last at start-up (it measures free memory).
// Throws std::invalid_argument when no block fits and CudaError for a device failure.
KvCache allocate_kv_cache(const model::LlamaConfig& c, const CudaBackendConfig& config,
                          DeviceAllocations& allocations);

}  // namespace troupe::gpu::cuda
