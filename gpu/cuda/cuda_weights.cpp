// Weight upload and on-device dequantization at start-up (see cuda_weights.hpp).
#include "gpu/cuda/cuda_weights.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

#include "gpu/cpu/geglu.hpp"
#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/dequantize.cuh"

namespace troupe::gpu::cuda {
namespace {

WeightType weight_type_of(const model::WeightView& v) {
  if (!is_cuda_weight_type(static_cast<uint32_t>(v.type))) {
    throw std::invalid_argument("tensor " + v.name + ": type " +
                                std::string(model::tensor_type_name(v.type)) +
                                " is not supported by the CUDA backend yet; use --backend cpu");
  }
  return v.type;
}

// Every host-to-device copy of the upload is stream-ordered on `stream`, the stream the
// conversions run on. A plain cudaMemcpy from pageable memory (a GGUF mapping) returns once the
// driver has taken the bytes, before its DMA has landed (CUDA's "API synchronization behavior"),
// and it is ordered only on the legacy default stream, which the backend's non-blocking stream
// does not wait for: a conversion launched right after it could read a staging buffer that still
// held the previous matrix's bytes, or a fresh allocation's garbage. Ordered on one stream, the
// copy lands before the conversion reads it, and the next copy into `staging` waits for that
// conversion, with no host synchronization in between.
void copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}

// Copies (or converts through `staging`) a projection's parts, row after row, into `dst`.
void upload_projection(const std::vector<const model::WeightView*>& parts, void* dst,
                       void* staging, ActType act, cudaStream_t stream) {
  int64_t row = 0;
  for (const model::WeightView* v : parts) {
    const WeightType type = weight_type_of(*v);
    char* out = static_cast<char*>(dst) + row * v->num_inputs * act_bytes(act);
    const bool same = (type == WeightType::kF16 && act == ActType::kF16) ||
                      (type == WeightType::kBF16 && act == ActType::kBF16);
    if (same) {
      copy_to_device(out, v->data, v->num_bytes, stream);
    } else {
      copy_to_device(staging, v->data, v->num_bytes, stream);
      dequantize_matrix(staging, type, v->num_outputs, v->num_inputs, out, act, stream);
    }
    row += v->num_outputs;
  }
}

float* upload_f32(const model::WeightView& v, DeviceAllocations& allocations, cudaStream_t stream) {
  if (v.type != model::TensorType::kF32) throw std::invalid_argument("tensor " + v.name + ": expected F32");
  float* p = allocations.allocate<float>(v.num_bytes);
  copy_to_device(p, v.data, v.num_bytes, stream);
  return p;
}

// The gemma3 norms a layer may carry; nullptr where it has none (the llama family).
float* upload_optional_f32(const std::optional<model::WeightView>& v,
                           DeviceAllocations& allocations, cudaStream_t stream) {
  return v ? upload_f32(*v, allocations, stream) : nullptr;
}

}  // namespace

DeviceWeights upload_weights(const model::LlamaWeights& w, ActType act, cudaStream_t stream,
                             DeviceAllocations& allocations) {
  const model::LlamaConfig& c = w.config();
  DeviceWeights d;
  // One staging buffer for the raw bytes of the largest matrix that needs converting.
  size_t staging_bytes = 0;
  for (const model::LlamaLayerWeights& l : w.layers()) {
    for (const model::WeightView* v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      staging_bytes = std::max<size_t>(staging_bytes, v->num_bytes);
    }
  }
  if (w.output().data != w.token_embd().data) staging_bytes = std::max<size_t>(staging_bytes, w.output().num_bytes);
  // GEGLU reads the CPU twin's own table (geglu_mul.cuh); it must outlive the stream-ordered
  // copy, which the synchronization at the end waits for.
  std::vector<uint16_t> gelu_table;
  if (c.ffn_activation == model::FfnActivation::kGeluTanh) {
    gelu_table.resize(65536);
    for (uint32_t h = 0; h < gelu_table.size(); ++h) {
      gelu_table[h] = cpu::gelu_fp16_table_entry(static_cast<uint16_t>(h));
    }
  }
  void* staging = nullptr;
  CUDA_CHECK(cudaMalloc(&staging, std::max<size_t>(staging_bytes, 1)));
  try {
    const int64_t E = c.n_embd, F = c.n_ff, Q = c.q_dim(), KV = c.kv_dim();
    for (const model::LlamaLayerWeights& l : w.layers()) {
      DeviceLayerWeights L;
      L.qkv = allocations.allocate((Q + 2 * KV) * E * 2);
      upload_projection({&l.wq, &l.wk, &l.wv}, L.qkv, staging, act, stream);
      L.wo = allocations.allocate(E * Q * 2);
      upload_projection({&l.wo}, L.wo, staging, act, stream);
      L.gate_up = allocations.allocate(2 * F * E * 2);
      upload_projection({&l.w_gate, &l.w_up}, L.gate_up, staging, act, stream);
      L.down = allocations.allocate(E * F * 2);
      upload_projection({&l.w_down}, L.down, staging, act, stream);
      L.attn_norm = upload_f32(l.attn_norm, allocations, stream);
      L.ffn_norm = upload_f32(l.ffn_norm, allocations, stream);
      L.q_norm = upload_optional_f32(l.q_norm, allocations, stream);
      L.k_norm = upload_optional_f32(l.k_norm, allocations, stream);
      L.post_attn_norm = upload_optional_f32(l.post_attn_norm, allocations, stream);
      L.post_ffn_norm = upload_optional_f32(l.post_ffn_norm, allocations, stream);
      d.gemm_bytes += ((Q + 2 * KV) * E + E * Q + 2 * F * E + E * F) * 2;
      d.layers.push_back(L);
    }
    const model::WeightView& embd = w.token_embd();
    d.embd_type = weight_type_of(embd);
    d.embd_row_bytes = static_cast<int64_t>(model::row_bytes(embd.type, static_cast<uint64_t>(E)));
    d.embd_raw = allocations.allocate(embd.num_bytes);
    copy_to_device(d.embd_raw, embd.data, embd.num_bytes, stream);
    d.output_norm = upload_f32(w.output_norm(), allocations, stream);
    if (w.rope_freqs()) d.rope_freqs = upload_f32(*w.rope_freqs(), allocations, stream);
    if (!gelu_table.empty()) {
      d.gelu_table = allocations.allocate<uint16_t>(gelu_table.size() * sizeof(uint16_t));
      copy_to_device(d.gelu_table, gelu_table.data(), gelu_table.size() * sizeof(uint16_t), stream);
    }
    d.output = allocations.allocate(static_cast<size_t>(c.n_vocab) * E * 2);
    if (w.output().data == embd.data) {  // tied: convert the copy already on the device
      dequantize_matrix(d.embd_raw, d.embd_type, c.n_vocab, E, d.output, act, stream);
    } else {
      upload_projection({&w.output()}, d.output, staging, act, stream);
    }
    d.gemm_bytes += static_cast<int64_t>(c.n_vocab) * E * 2;
    CUDA_CHECK(cudaStreamSynchronize(stream));
  } catch (...) {
    cudaStreamSynchronize(stream);  // nothing may still read `staging` when it is freed
    cudaFree(staging);
    throw;
  }
  CUDA_CHECK(cudaFree(staging));
  return d;
}

}  // namespace troupe::gpu::cuda
