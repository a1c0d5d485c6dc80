// KV cache sizing and allocation at start-up (see kv_memory.hpp).
#include "gpu/cuda/kv_memory.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "gpu/cuda/cuda_check.cuh"
#include "model/enum_names.hpp"

namespace troupe::gpu::cuda {

KvElement kv_element_of(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF16: return KvElement::kF16;
    case KvDtype::kFp8E4M3: return KvElement::kFp8E4M3;
    case KvDtype::kQ8_0: break;
  }
  throw std::invalid_argument("CUDA backend: cache.kv_dtype \"" +
                              std::string(kKvDtypeNames.name(dtype)) +
                              "\" is the CPU backend's; the CUDA backend takes f16 or fp8_e4m3");
}

KvCache allocate_kv_cache(const model::LlamaConfig& c, const CudaBackendConfig& config,
                          const KvGroups& groups, DeviceAllocations& allocations) {
  const KvElement element = kv_element_of(config.kv_dtype);
  const int64_t row_bytes = kv_row_bytes(config.kv_dtype, c.head_dim);  // one token, one KV head
  const int64_t per_block = static_cast<int64_t>(groups.layers_per_group) * 2 * c.n_head_kv *
                            config.block_size * row_bytes;
  int64_t blocks = config.num_blocks;
  if (blocks <= 0) {
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const int64_t used = static_cast<int64_t>(total_bytes - free_bytes);
    const int64_t reserve = 256ll << 20;  // cuBLAS workspaces, allocator slack
    const int64_t budget = static_cast<int64_t>(config.gpu_memory_utilization * static_cast<double>(total_bytes)) - used - reserve;
    blocks = budget / per_block;
    if (blocks <= 0) {
      throw std::invalid_argument("CUDA backend: gpu_memory_utilization " + std::to_string(config.gpu_memory_utilization) +
                                  " leaves no memory for KV blocks after the weights (" + std::to_string(used >> 20) + " MiB in use)");
    }
    blocks = std::min<int64_t>(blocks, 1 << 30);
  }
  // The pinned host mirror (KV transfer) takes as many bytes of host memory as the KV.
  if (config.kv_host_mirror) blocks = std::min(blocks, config.max_kv_host_mirror_bytes / per_block);
  if (blocks <= 0) throw std::invalid_argument("CUDA backend: no KV block fits max_kv_host_mirror_bytes");
  KvCache kv_cache;
  kv_cache.element = element;
  if (element == KvElement::kFp8E4M3) kv_cache.k_scale = kv_cache.v_scale = kFp8KvScale;
  kv_cache.num_blocks = static_cast<int32_t>(blocks);
  kv_cache.bytes = per_block * kv_cache.num_blocks;
  char* kv = allocations.allocate<char>(static_cast<size_t>(kv_cache.bytes));
  const size_t side = static_cast<size_t>(kv_cache.num_blocks) * c.n_head_kv * config.block_size * row_bytes;
  kv_cache.layers.resize(c.n_layer);
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const size_t slot = static_cast<size_t>(groups.slot_of[static_cast<size_t>(l)]);
    kv_cache.layers[l].k_cache = kv + side * 2 * slot;
    kv_cache.layers[l].v_cache = kv + side * (2 * slot + 1);
  }
  return kv_cache;
}

}  // namespace troupe::gpu::cuda
