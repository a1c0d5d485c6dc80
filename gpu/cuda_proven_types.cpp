// The CUDA backend's proven weight types (see cuda_proven_types.hpp).
#include "gpu/cuda_proven_types.hpp"

#include <array>
#include <string_view>

namespace troupe::gpu {
namespace {

using model::TensorType;

// Add a row only from a bench/device_check.sh run whose per-type parity table shows the type
// within its tolerance at the default model's shape (and the real model, where one of the type
// exists). The figures behind each row are in bench/RESULTS.md.
constexpr std::array kProofs = {
    CudaTypeProof{TensorType::kF16, "2026-12-04", "NVIDIA H200 (sm_90)",
                  "faecbdc: logits within 9e-4 of the CPU backend at the SmolLM2-135M shape, 1-30 "
                  "layers; SmolLM2-135M-Instruct rewritten to F16 served the CPU backend's greedy "
                  "text on 23 of 24 prompts (the 24th a near-tie)"},
    CudaTypeProof{TensorType::kBF16, "2026-12-04", "NVIDIA H200 (sm_90)",
                  "faecbdc: logits within 6e-3 of the CPU backend at the SmolLM2-135M shape "
                  "(BF16 bound 5e-2); dummy weights only"},
};

// FP8 E4M3 (kv_write.cu, attention.cu: compiled and tested against their CPU twins in
// tests/gpu/cuda_ops_test.cpp) earns its row from bench/device_check.sh's fp8 lines.
constexpr std::array kKvProofs = {
    CudaKvProof{KvDtype::kF16, "2026-12-04", "NVIDIA H200 (sm_90)",
                "faecbdc: the F16 weights' parity run above, whose cache was f16"},
};

// gemma3 (step_forward.cpp's Gemma seams, head_rmsnorm.cu, geglu_mul.cu, attention.cu's sliding
// window and head_dim 256: compiled and tested against their CPU twins in
// tests/gpu/cuda_gemma3_test.cpp) earns its row from bench/device_check.sh's CudaGemma3 lines.
constexpr std::array kGraphProofs = {
    CudaGraphProof{"llama", "2026-12-04", "NVIDIA H200 (sm_90)",
                   "faecbdc: the F16 parity run above (SmolLM2-135M, a llama)"},
};

// "a, b, c": what a refusal lists as proven.
template <typename Proofs, typename Name>
std::string proven_list(const Proofs& proofs, Name name) {
  std::string list;
  for (const auto& p : proofs) list += (list.empty() ? "" : ", ") + std::string(name(p));
  return list;
}

}  // namespace

const char* cuda_graph_of(const model::LlamaConfig& c) {
  return c.uses_gemma_seams() ? "gemma3" : "llama";
}

std::optional<CudaGraphProof> cuda_graph_proof_of(const model::LlamaConfig& c) {
  const std::string_view graph = cuda_graph_of(c);
  for (const CudaGraphProof& p : kGraphProofs) {
    if (graph == p.graph) return p;
  }
  return std::nullopt;
}

std::string unproven_cuda_graph_message(const model::LlamaConfig& c) {
  const std::string proven =
      proven_list(kGraphProofs, [](const CudaGraphProof& p) { return p.graph; });
  return "architecture " + c.architecture + " runs the CUDA backend's " + cuda_graph_of(c) +
         " graph, which has not been proven correct on a GPU yet (proven: " + proven +
         "; gpu/cuda_proven_types.cpp); use --backend cpu";
}

std::span<const CudaKvProof> cuda_proven_kv_dtypes() { return kKvProofs; }

std::optional<CudaKvProof> cuda_kv_proof_of(KvDtype dtype) {
  for (const CudaKvProof& p : kKvProofs) {
    if (p.dtype == dtype) return p;
  }
  return std::nullopt;
}

std::string unproven_cuda_kv_message(KvDtype dtype) {
  const std::string proven =
      proven_list(kKvProofs, [](const CudaKvProof& p) { return kKvDtypeNames.name(p.dtype); });
  return "cache.kv_dtype \"" + std::string(kKvDtypeNames.name(dtype)) +
         "\" has CUDA kernels that have not been proven correct on a GPU yet (proven: " + proven +
         "; gpu/cuda_proven_types.cpp)";
}

std::span<const CudaTypeProof> cuda_proven_weight_types() {
  return kProofs;
}

std::optional<CudaTypeProof> cuda_proof_of(TensorType type) {
  for (const CudaTypeProof& p : kProofs) {
    if (p.type == type) return p;
  }
  return std::nullopt;
}

std::optional<UnprovenTensor> first_unproven_cuda_tensor(const model::LlamaWeights& w) {
  auto unproven = [](const model::WeightView& v) -> std::optional<UnprovenTensor> {
    if (cuda_proof_of(v.type)) return std::nullopt;
    return UnprovenTensor{v.name, v.type};
  };
  if (auto t = unproven(w.token_embd())) return t;
  for (const model::LlamaLayerWeights& l : w.layers()) {
    for (const model::WeightView* v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      if (auto t = unproven(*v)) return t;
    }
  }
  return unproven(w.output());
}

std::string unproven_cuda_message(const UnprovenTensor& t) {
  const std::string proven =
      proven_list(kProofs, [](const CudaTypeProof& p) { return model::tensor_type_name(p.type); });
  return "tensor " + t.name + " has type " + std::string(model::tensor_type_name(t.type)) +
         ", which the CUDA backend has not been proven to compute correctly on a GPU (proven: " +
         proven + "; gpu/cuda_proven_types.cpp); use --backend cpu";
}

}  // namespace troupe::gpu
