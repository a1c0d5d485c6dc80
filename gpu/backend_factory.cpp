#include "gpu/backend_factory.hpp"

#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/device_probe.hpp"

#ifdef TROUPE_HAVE_CUDA
#include "gpu/cuda/cuda_backend.hpp"
#endif

namespace troupe::gpu {

BuiltBackend make_backend(std::shared_ptr<const model::GgufFile> file,
                          const BackendOptions& options) {
  BuiltBackend built;
  if (options.request != BackendRequest::kCpu) {
    const DeviceProbe probe = probe_devices();
    if (probe.cuda_devices.empty()) {
      built.note = "no CUDA device (" + probe.cuda_status + "); using the CPU backend";
    } else if (options.request == BackendRequest::kAuto) {
      built.note = "CUDA device " + probe.cuda_devices.front().name +
                   " found; `auto` keeps the CPU backend until the CUDA backend is verified on a "
                   "GPU (use --backend cuda to try it)";
    } else {
#ifdef TROUPE_HAVE_CUDA
      cuda::CudaBackendConfig cuda_config;
      cuda_config.device = probe.cuda_devices.front().index;
      cuda_config.block_size = options.block_size;
      cuda_config.num_blocks = options.num_blocks;
      cuda_config.gpu_memory_utilization = options.gpu_memory_utilization;
      cuda_config.max_num_batched_tokens = options.max_num_batched_tokens;
      cuda_config.max_num_seqs = options.max_num_seqs;
      cuda_config.kv_host_mirror = options.kv_host_mirror;
      cuda_config.max_kv_host_mirror_bytes = options.max_kv_host_mirror_bytes;
      built.backend = cuda::CudaBackend::from_gguf(std::move(file), cuda_config);
      built.note = "CUDA backend on " + probe.cuda_devices.front().name +
                   " (experimental: not yet verified on a GPU)";
      if (options.cpu_prefill_attention != cpu::PrefillAttentionPrecision::kExact) {
        built.note += "; cpu.prefill_attention applies to the CPU backend only";
      }
      return built;
#else
      built.note = "backend 'cuda' requested, but this binary was built without CUDA; using the CPU backend";
#endif
    }
  } else {
    built.note = "CPU backend (configured)";
  }
  cpu::CpuBackendConfig config;
  config.num_threads = options.cpu_threads;
  config.prefill_attention = options.cpu_prefill_attention;
  config.num_blocks = options.num_blocks;
  config.kv_memory_bytes = options.kv_memory_bytes;
  config.block_size = options.block_size;
  built.backend = cpu::CpuBackend::from_gguf(std::move(file), config);
  if (config.prefill_attention == cpu::PrefillAttentionPrecision::kBf16) {
    built.note += cpu::best_bf16_kernels() == cpu::Bf16Kernels::kAmx
                      ? "; prompt attention in bf16 on AMX tiles"
                      : "; prompt attention in bf16 (AVX512-BF16)";
  }
  return built;
}

}  // namespace troupe::gpu
