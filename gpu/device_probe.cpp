#include "gpu/device_probe.hpp"

#ifdef TROUPE_HAVE_CUDA
#include "gpu/cuda/device_query.cuh"
#endif

namespace troupe::gpu {

DeviceProbe probe_devices() {
  DeviceProbe probe;
#ifdef TROUPE_HAVE_CUDA
  probe.cuda_compiled = true;
  const cuda::DeviceQueryResult count = cuda::query_device_count();
  if (count.status != 0) {
    probe.cuda_status = std::string("no CUDA device: ") + count.status_text;
    return probe;
  }
  for (int i = 0; i < count.device_count; ++i) {
    cuda::DeviceProperties props;
    if (!cuda::query_device_properties(i, &props)) continue;
    probe.cuda_devices.push_back(
        CudaDevice{i, props.name, props.major, props.minor, props.total_memory});
  }
  probe.cuda_status = probe.cuda_devices.empty() ? "no CUDA device" : "ok";
#else
  probe.cuda_status = "this binary was built without CUDA (TROUPE_CUDA=OFF or no nvcc)";
#endif
  return probe;
}

}  // namespace troupe::gpu
