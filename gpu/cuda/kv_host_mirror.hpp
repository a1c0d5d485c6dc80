// A pinned host copy of the device KV blocks, in the same layout, for moving KV between servers
// (disaggregated prefill/decode, issue 17). Debian's UCX has no CUDA module, so transports see
// host memory only: a prefill server copies the KV each step writes to this mirror (on the
// step's stream, before its completion event, so a finished request's blocks are in host memory
// by the time the scheduler hands them out); a decode server's pulls land in the mirror and the
// next step uploads those blocks to the device before its forward pass.
//
// Layout: the device KV is one buffer [layer][K|V][num_blocks][n_kv][block_size][head_dim]
// (kv_memory.hpp); the mirror has the same offsets, so one block of one layer's K or V is the
// contiguous run of block_bytes at layer * layer_stride + kv * kv_stride + block * block_bytes.
//
// Thread-safety: allocate() from the backend's constructor; the copies from the gpu-worker's
// executor (the thread that enqueues steps). The memory is written by the transport's thread
// only in blocks the scheduler set aside for a pull (no step touches them meanwhile).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "gpu/backend.hpp"
#include "gpu/cuda/kv_memory.hpp"

namespace troupe::gpu::cuda {

class KvHostMirror {
 public:
  KvHostMirror() = default;
  KvHostMirror(const KvHostMirror&) = delete;
  KvHostMirror& operator=(const KvHostMirror&) = delete;
  KvHostMirror(KvHostMirror&& other) noexcept;
  KvHostMirror& operator=(KvHostMirror&& other) noexcept;
  ~KvHostMirror();

  // Pinned memory (cudaHostAlloc) the size of `kv`. Throws CudaError when it cannot.
  static KvHostMirror allocate(const KvCache& kv, const model::LlamaConfig& c, int32_t block_size);

  bool empty() const { return host_ == nullptr; }
  KvHostMemory memory() const;

  // Enqueue on `stream` the copies of every layer's K and V of `blocks`, device -> host or
  // host -> device. Consecutive block ids go as one copy per layer and K/V.
  void download(std::span<const int32_t> blocks, cudaStream_t stream) const;
  void upload(std::span<const int32_t> blocks, cudaStream_t stream) const;

 private:
  void copy(std::span<const int32_t> blocks, cudaMemcpyKind kind, cudaStream_t stream) const;

  std::byte* host_ = nullptr;
  std::byte* device_ = nullptr;  // the device KV buffer's base
  KvHostMemory memory_;
};

// The blocks a step writes KV into: for each span, the blocks of its block-table row that hold
// positions [context_len - num_tokens, context_len). Sorted, unique.
std::vector<int32_t> blocks_written_by(const StepBatch& batch, int32_t block_size);

}  // namespace troupe::gpu::cuda
