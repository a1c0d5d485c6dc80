// The weight types the CUDA backend has been proven to compute correctly on a real GPU, with the
// run that proved each, and the check that keeps a model using any other type off the device.
// One place: bench/device_check.sh's per-type parity table is what adds a type here (with its
// date, device and commit), never a build or a test that cannot run the kernels.
//
// Why a list at all: on 2026-12-04 an H200 answered garbage on the default model (Q4_1 + Q8_0)
// while every start-up and test path looked healthy, so silence is not evidence. A type earns
// its place by greedy/logit parity with the CPU backend at a real model's shape.
//
// Plain C++ (no CUDA): the factory and its tests use it in every build.
//
// Thread-safety: pure functions over constant data; callable from any thread.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "gpu/kv_dtype.hpp"
#include "model/llama_weights.hpp"
#include "model/tensor_type.hpp"

namespace troupe::gpu {

struct CudaTypeProof {
  model::TensorType type;
  const char* date;      // of the GPU run
  const char* device;    // what it ran on
  const char* evidence;  // the commit and what passed
};

// Every proven type, in the order they were proven.
std::span<const CudaTypeProof> cuda_proven_weight_types();

// The proof for `type`, or nullopt when it has none.
std::optional<CudaTypeProof> cuda_proof_of(model::TensorType type);

// A matrix the CUDA backend would compute with (the layers' projections, token_embd and the
// output projection) whose type has no proof.
struct UnprovenTensor {
  std::string name;
  model::TensorType type;
};

// The first such matrix of `w` in file order (token_embd, layers, output), or nullopt when every
// matrix type is proven. Norms and rope_freqs (F32 vectors copied as they are) are not checked.
std::optional<UnprovenTensor> first_unproven_cuda_tensor(const model::LlamaWeights& w);

// What a refusal says: the tensor and its type, the proven types, and what to do instead.
std::string unproven_cuda_message(const UnprovenTensor& t);

// The KV cache formats (cache.kv_dtype) proven the same way: the run whose greedy and logit
// parity showed the format's kernels (kv_write.cu, attention.cu) right on a GPU.
struct CudaKvProof {
  KvDtype dtype;
  const char* date;
  const char* device;
  const char* evidence;
};
std::span<const CudaKvProof> cuda_proven_kv_dtypes();
std::optional<CudaKvProof> cuda_kv_proof_of(KvDtype dtype);

// What a refusal of an unproven KV format says.
std::string unproven_cuda_kv_message(KvDtype dtype);

// The forward-pass graphs proven the same way: "llama" (the llama family's graph) and "gemma3"
// (LlamaConfig's Gemma seams: QK norm, post norms, GEGLU, embedding and query scales,
// sliding-window layers in KV groups), each by a GPU run of its parity tests.
struct CudaGraphProof {
  const char* graph;
  const char* date;
  const char* device;
  const char* evidence;
};
// The graph a model runs on the CUDA backend: "gemma3" when any Gemma seam is on, else "llama".
const char* cuda_graph_of(const model::LlamaConfig& c);
std::optional<CudaGraphProof> cuda_graph_proof_of(const model::LlamaConfig& c);
// What a refusal of an unproven graph says.
std::string unproven_cuda_graph_message(const model::LlamaConfig& c);

}  // namespace troupe::gpu
