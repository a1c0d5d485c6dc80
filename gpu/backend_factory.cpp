#include "gpu/backend_factory.hpp"

#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/device_probe.hpp"

namespace troupe::gpu {

BuiltBackend make_backend(std::shared_ptr<const model::GgufFile> file,
                          const BackendOptions& options) {
  BuiltBackend built;
  if (options.request != BackendRequest::kCpu) {
    const DeviceProbe probe = probe_devices();
    if (probe.cuda_devices.empty()) {
      built.note = "no CUDA device (" + probe.cuda_status + "); using the CPU backend";
    } else {
      // The CUDA step backend (issue 8) is not part of this build yet: the device is detected
      // and reported, and steps run on the CPU reference backend.
      built.note = "CUDA device " + probe.cuda_devices.front().name +
                   " found, but this build has no CUDA step backend yet; using the CPU backend";
    }
  } else {
    built.note = "CPU backend (configured)";
  }
  cpu::CpuBackendConfig config;
  config.num_threads = options.cpu_threads;
  config.num_blocks = options.num_blocks;
  config.kv_memory_bytes = options.kv_memory_bytes;
  config.block_size = options.block_size;
  built.backend = cpu::CpuBackend::from_gguf(std::move(file), config);
  return built;
}

}  // namespace troupe::gpu
