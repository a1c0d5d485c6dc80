#include "gpu/backend_factory.hpp"

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/cuda_proven_types.hpp"
#include "gpu/device_probe.hpp"

#ifdef TROUPE_HAVE_CUDA
#include "gpu/cuda/cuda_backend.hpp"
#endif

namespace troupe::gpu {

namespace {

// What keeps the CUDA backend off this model and KV format, or nullopt: an unproven graph, weight
// type or KV format (gpu/cuda_proven_types.hpp).
std::optional<std::string> unproven_on_cuda(const model::LlamaWeights& weights, KvDtype kv_dtype) {
  if (!cuda_graph_proof_of(weights.config())) return unproven_cuda_graph_message(weights.config());
  if (const std::optional<UnprovenTensor> t = first_unproven_cuda_tensor(weights)) {
    return unproven_cuda_message(*t);
  }
  if (!cuda_kv_proof_of(kv_dtype)) return unproven_cuda_kv_message(kv_dtype);
  return std::nullopt;
}

// The choice by device, build and proofs; the KV format's fit with the CPU backend comes after.
BackendDecision decide_device(BackendRequest request, bool cuda_compiled,
                              const std::vector<std::string>& cuda_devices,
                              const std::string& probe_status, const model::LlamaWeights& weights,
                              bool allow_unproven, KvDtype kv_dtype) {
  if (request == BackendRequest::kCpu) return {BackendVerdict::kCpu, "CPU backend (configured)"};
  if (cuda_devices.empty()) {
    return {BackendVerdict::kCpu, "no CUDA device (" + probe_status + "); using the CPU backend"};
  }
  const std::string& device = cuda_devices.front();
  if (!cuda_compiled) {
    return {BackendVerdict::kCpu,
            "CUDA device " + device +
                " found, but this binary was built without CUDA; using the CPU backend"};
  }
  if (kv_dtype == KvDtype::kQ8_0) {
    // llama.cpp's q8_0 blocks are the CPU kernels' format; the CUDA ones read f16 and FP8.
    const std::string why = "cache.kv_dtype \"q8_0\" is the CPU backend's (the CUDA backend keeps "
                            "f16 or fp8_e4m3)";
    if (request == BackendRequest::kAuto) {
      return {BackendVerdict::kCpu, "CUDA device " + device + " found, but " + why +
                                        ": using the CPU backend"};
    }
    return {BackendVerdict::kRefuse, "--backend cuda: " + why};
  }
  const std::optional<std::string> unproven = unproven_on_cuda(weights, kv_dtype);
  if (!unproven) return {BackendVerdict::kCuda, "CUDA backend on " + device};
  if (request == BackendRequest::kAuto) {
    return {BackendVerdict::kCpu,
            "CUDA device " + device + " found, but " + *unproven + ": using the CPU backend"};
  }
  if (allow_unproven) {
    return {BackendVerdict::kCuda, "CUDA backend on " + device + " UNPROVEN " +
                                       "(TROUPE_CUDA_UNPROVEN_TYPES=allow): " + *unproven};
  }
  return {BackendVerdict::kRefuse,
          "--backend cuda: " + *unproven +
              " (TROUPE_CUDA_UNPROVEN_TYPES=allow runs it anyway, to verify it on a GPU)"};
}

}  // namespace

BackendDecision decide_backend(BackendRequest request, bool cuda_compiled,
                               const std::vector<std::string>& cuda_devices,
                               const std::string& probe_status, const model::LlamaWeights& weights,
                               bool allow_unproven, KvDtype kv_dtype) {
  BackendDecision d = decide_device(request, cuda_compiled, cuda_devices, probe_status, weights,
                                    allow_unproven, kv_dtype);
  if (d.verdict == BackendVerdict::kCpu && kv_dtype == KvDtype::kFp8E4M3) {
    // Refused here, with the reason the CUDA backend was not taken, rather than by the CPU
    // backend's constructor, which could not say why.
    return {BackendVerdict::kRefuse, "cache.kv_dtype \"fp8_e4m3\" needs the CUDA backend (the CPU "
                                     "backend keeps f16 or q8_0), and it was not taken: " + d.note};
  }
  return d;
}

BuiltBackend make_backend(std::shared_ptr<const model::GgufFile> file,
                          const BackendOptions& options) {
  model::LlamaWeights weights = model::LlamaWeights::from_gguf(file);
  std::vector<std::string> devices;
  DeviceProbe probe;
  if (options.request != BackendRequest::kCpu) {
    probe = probe_devices();
    for (const CudaDevice& d : probe.cuda_devices) devices.push_back(d.name);
  }
  const char* allow = std::getenv("TROUPE_CUDA_UNPROVEN_TYPES");
  const BackendDecision decision =
      decide_backend(options.request, probe.cuda_compiled, devices, probe.cuda_status, weights,
                     allow != nullptr && std::string_view(allow) == "allow", options.kv_dtype);
  BuiltBackend built;
  built.note = decision.note;
  if (decision.verdict == BackendVerdict::kRefuse) throw std::runtime_error(decision.note);
#ifdef TROUPE_HAVE_CUDA
  if (decision.verdict == BackendVerdict::kCuda) {
    cuda::CudaBackendConfig cuda_config;
    cuda_config.device = probe.cuda_devices.front().index;
    cuda_config.block_size = options.block_size;
    cuda_config.kv_dtype = options.kv_dtype;
    cuda_config.num_blocks = options.num_blocks;
    cuda_config.gpu_memory_utilization = options.gpu_memory_utilization;
    cuda_config.max_num_batched_tokens = options.max_num_batched_tokens;
    cuda_config.max_num_seqs = options.max_num_seqs;
    cuda_config.kv_host_mirror = options.kv_host_mirror;
    cuda_config.max_kv_host_mirror_bytes = options.max_kv_host_mirror_bytes;
    built.backend = std::make_unique<cuda::CudaBackend>(std::move(weights), cuda_config);
    if (options.cpu_prefill_attention != cpu::PrefillAttentionPrecision::kExact) {
      built.note += "; cpu.prefill_attention applies to the CPU backend only";
    }
    return built;
  }
#endif
  cpu::CpuBackendConfig config;
  config.num_threads = options.cpu_threads;
  config.prefill_attention = options.cpu_prefill_attention;
  config.num_blocks = options.num_blocks;
  config.kv_memory_bytes = options.kv_memory_bytes;
  config.block_size = options.block_size;
  config.kv_dtype = options.kv_dtype;
  built.backend = std::make_unique<cpu::CpuBackend>(std::move(weights), config);
  if (config.prefill_attention == cpu::PrefillAttentionPrecision::kBf16) {
    built.note += cpu::best_bf16_kernels() == cpu::Bf16Kernels::kAmx
                      ? "; prompt attention in bf16 on AMX tiles"
                      : "; prompt attention in bf16 (AVX512-BF16)";
  }
  return built;
}

}  // namespace troupe::gpu
