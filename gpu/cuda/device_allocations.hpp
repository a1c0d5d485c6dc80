// DeviceAllocations: the backend's cudaMalloc'd buffers (weights, KV, scratch, step inputs),
// recorded so a failed start-up or the backend's release frees them all at once.
//
// Thread-safety: one thread at a time (the backend's constructor, then the thread that calls
// launch()); no locking.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "gpu/cuda/cuda_check.cuh"

namespace troupe::gpu::cuda {

struct DeviceAllocations {
  std::vector<void*> pointers;

  template <typename T = void>
  T* allocate(size_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
    pointers.push_back(p);
    return static_cast<T*>(p);
  }
  // Frees one recorded buffer (cudaFree synchronizes the device).
  void free_one(void* p) {
    auto it = std::find(pointers.begin(), pointers.end(), p);
    CUDA_CHECK(cudaFree(p));
    pointers.erase(it);
  }
  // Frees every recorded buffer, ignoring errors (teardown).
  void free_all() {
    for (void* p : pointers) cudaFree(p);
    pointers.clear();
  }
};

}  // namespace troupe::gpu::cuda
