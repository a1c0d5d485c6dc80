// KV cache memory on the device: how many blocks gpu_memory_utilization leaves after weights and
// scratch (or CudaBackendConfig::num_blocks), allocated as one buffer split per layer into K and V
// (the CPU backend's layout), of fp16 or FP8 E4M3 elements (cache.kv_dtype): FP8 holds twice the
// blocks in the same memory. With KV groups (gpu/kv_groups.hpp: gemma3) a block (page) holds one
// group's layers: the buffer has layers_per_group K/V pairs, and layer l uses pair slot_of[l],
// the pages of its group's block tables (the CPU backend's layout too).
//
// Thread-safety: allocate_kv_cache() from the backend's constructor only; the result is
// read-only afterwards.
#pragma once

#include <cstdint>
#include <vector>

#include "gpu/cuda/cuda_backend.hpp"
#include "gpu/cuda/device_allocations.hpp"
#include "gpu/cuda/kernel_types.cuh"
#include "gpu/kv_dtype.hpp"
#include "gpu/kv_groups.hpp"
#include "model/llama_config.hpp"

namespace troupe::gpu::cuda {

// The FP8 cache's scale for every layer's K and V: GGUF files carry no calibrated KV scales, and
// 1.0 is what vLLM uses for a checkpoint without them. E4M3's relative precision is the same
// across its range; 1.0 keeps keys and values (|x| of a few units to tens) far inside ±448.
inline constexpr float kFp8KvScale = 1.0f;

// The element a KvDtype is stored as on the device; std::invalid_argument for a format the CUDA
// kernels do not read (q8_0, the CPU backend's), naming it.
KvElement kv_element_of(KvDtype dtype);

struct LayerKvCache {
  void* k_cache = nullptr;
  void* v_cache = nullptr;
};

struct KvCache {
  KvElement element = KvElement::kF16;
  float k_scale = 1.0f;  // FP8: the cache holds k / k_scale and v / v_scale (kFp8KvScale)
  float v_scale = 1.0f;
  int32_t num_blocks = 0;
  int64_t bytes = 0;
  std::vector<LayerKvCache> layers;  // [n_layer]; layers of different groups share memory
};

// Sizes and allocates the KV blocks; call it last at start-up (it measures free memory).
// Throws std::invalid_argument when no block fits and CudaError for a device failure.
KvCache allocate_kv_cache(const model::LlamaConfig& c, const CudaBackendConfig& config,
                          const KvGroups& groups, DeviceAllocations& allocations);

}  // namespace troupe::gpu::cuda
