// The pinned host mirror of the device KV (see kv_host_mirror.hpp).
#include "gpu/cuda/kv_host_mirror.hpp"

#include <algorithm>
#include <utility>

#include "gpu/cuda/cuda_check.cuh"

namespace troupe::gpu::cuda {

KvHostMirror::KvHostMirror(KvHostMirror&& other) noexcept { *this = std::move(other); }

KvHostMirror& KvHostMirror::operator=(KvHostMirror&& other) noexcept {
  if (this != &other) {
    if (host_ != nullptr) cudaFreeHost(host_);
    host_ = std::exchange(other.host_, nullptr);
    device_ = std::exchange(other.device_, nullptr);
    memory_ = other.memory_;
  }
  return *this;
}

KvHostMirror::~KvHostMirror() {
  if (host_ != nullptr) cudaFreeHost(host_);
}

KvHostMirror KvHostMirror::allocate(const KvCache& kv, const model::LlamaConfig& c,
                                    int32_t block_size) {
  KvHostMirror mirror;
  void* host = nullptr;
  CUDA_CHECK(cudaHostAlloc(&host, static_cast<size_t>(kv.bytes), cudaHostAllocDefault));
  mirror.host_ = static_cast<std::byte*>(host);
  mirror.device_ = static_cast<std::byte*>(kv.layers.front().k_cache);
  KvHostMemory& m = mirror.memory_;
  m.base = mirror.host_;
  m.bytes = kv.bytes;
  m.num_layers = c.n_layer;
  m.num_kv_heads = c.n_head_kv;
  m.head_dim = c.head_dim;
  m.block_size = block_size;
  m.num_blocks = kv.num_blocks;
  m.dtype = kv.element == KvElement::kFp8E4M3 ? KvDtype::kFp8E4M3 : KvDtype::kF16;
  m.block_bytes = static_cast<int64_t>(c.n_head_kv) * block_size * kv_row_bytes(m.dtype, c.head_dim);
  m.kv_stride = static_cast<std::byte*>(kv.layers.front().v_cache) - mirror.device_;
  m.layer_stride = 2 * m.kv_stride;
  return mirror;
}

KvHostMemory KvHostMirror::memory() const { return memory_; }

void KvHostMirror::download(std::span<const int32_t> blocks, cudaStream_t stream) const {
  copy(blocks, cudaMemcpyDeviceToHost, stream);
}

void KvHostMirror::upload(std::span<const int32_t> blocks, cudaStream_t stream) const {
  copy(blocks, cudaMemcpyHostToDevice, stream);
}

void KvHostMirror::copy(std::span<const int32_t> blocks, cudaMemcpyKind kind, cudaStream_t stream) const {
  if (host_ == nullptr || blocks.empty()) return;
  std::vector<int32_t> sorted(blocks.begin(), blocks.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  // NOTE: one copy per run of consecutive blocks per layer and K/V; a gather kernel into one
  // staging copy would cut the calls further when block ids are scattered (measure first).
  size_t run_start = 0;
  while (run_start < sorted.size()) {
    size_t run_end = run_start + 1;
    while (run_end < sorted.size() && sorted[run_end] == sorted[run_end - 1] + 1) ++run_end;
    const int64_t offset_in_side = sorted[run_start] * memory_.block_bytes;
    const auto bytes = static_cast<size_t>(static_cast<int64_t>(run_end - run_start) * memory_.block_bytes);
    for (int32_t layer = 0; layer < memory_.num_layers; ++layer) {
      for (int64_t kv = 0; kv < 2; ++kv) {
        const int64_t offset = layer * memory_.layer_stride + kv * memory_.kv_stride + offset_in_side;
        std::byte* host = host_ + offset;
        std::byte* device = device_ + offset;
        if (kind == cudaMemcpyDeviceToHost) {
          CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, kind, stream));
        } else {
          CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, kind, stream));
        }
      }
    }
    run_start = run_end;
  }
}

std::vector<int32_t> blocks_written_by(const StepBatch& batch, int32_t block_size) {
  std::vector<int32_t> blocks;
  for (const SequenceSlice& slice : batch.seqs) {
    const int32_t first = (slice.context_len - slice.num_tokens) / block_size;
    const int32_t last = (slice.context_len - 1) / block_size;
    const size_t row = static_cast<size_t>(slice.block_table_row) * static_cast<size_t>(batch.max_blocks_per_seq);
    for (int32_t i = first; i <= last; ++i) {
      const int32_t block = batch.block_tables[row + static_cast<size_t>(i)];
      if (block >= 0) blocks.push_back(block);
    }
  }
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  return blocks;
}

}  // namespace troupe::gpu::cuda
