// Plain C++ boundary between host code and the CUDA runtime's device queries. No Boost, simdjson
// or spdlog on either side of it (TOOLCHAIN.md pitfall 3).
#pragma once

#include <cstddef>

namespace troupe::gpu::cuda {

struct DeviceQueryResult {
  int status = 0;           // cudaError_t of the count query; 0 = success
  int device_count = 0;
  char status_text[128] = {};
};

struct DeviceProperties {
  char name[256] = {};
  int major = 0;
  int minor = 0;
  size_t total_memory = 0;
};

DeviceQueryResult query_device_count();
bool query_device_properties(int device, DeviceProperties* out);

}  // namespace troupe::gpu::cuda
