// Which compute devices this process can use: the answer `--backend auto` is based on.
//
// Thread-safety: any thread; probing CUDA initialises the driver on first call.
#pragma once

#include <string>
#include <vector>

namespace troupe::gpu {

struct CudaDevice {
  int index = 0;
  std::string name;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  size_t total_memory_bytes = 0;
};

struct DeviceProbe {
  bool cuda_compiled = false;      // this binary contains the CUDA backend
  std::vector<CudaDevice> cuda_devices;
  std::string cuda_status;         // why no device was found, or the driver/runtime versions
};

// Never throws and never crashes without a driver (TOOLCHAIN.md pitfall 5).
DeviceProbe probe_devices();

}  // namespace troupe::gpu
