// Device discovery through the CUDA runtime. Without a driver, cudaGetDeviceCount returns
// cudaErrorInsufficientDriver and leaves the count unset, so it starts at 0.
#include "gpu/cuda/device_query.cuh"

#include <cuda_runtime.h>

#include <cstdio>

namespace troupe::gpu::cuda {

DeviceQueryResult query_device_count() {
  DeviceQueryResult result;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  result.status = static_cast<int>(status);
  result.device_count = status == cudaSuccess ? count : 0;
  std::snprintf(result.status_text, sizeof(result.status_text), "%s",
                status == cudaSuccess ? "ok" : cudaGetErrorString(status));
  if (status != cudaSuccess) (void)cudaGetLastError();  // clear the sticky error
  return result;
}

bool query_device_properties(int device, DeviceProperties* out) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  std::snprintf(out->name, sizeof(out->name), "%s", prop.name);
  out->major = prop.major;
  out->minor = prop.minor;
  out->total_memory = prop.totalGlobalMem;
  return true;
}

}  // namespace troupe::gpu::cuda
