// CudaBackend: ties the weights (cuda_weights), KV memory (kv_memory), step inputs
// (step_inputs), the forward pass (step_forward) and the completion poll thread
// (step_completion) into gpu::Backend (see cuda_backend.hpp).
#include "gpu/cuda/cuda_backend.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <future>
#include <stdexcept>

#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/cuda_weights.hpp"
#include "gpu/cuda/device_allocations.hpp"
#include "gpu/cuda/kv_host_mirror.hpp"
#include "gpu/cuda/kv_memory.hpp"
#include "gpu/cuda/sampling.cuh"
#include "gpu/cuda/step_completion.hpp"
#include "gpu/cuda/step_forward.hpp"
#include "gpu/cuda/step_inputs.hpp"

namespace troupe::gpu::cuda {

struct CudaBackend::Impl {
  // ----- configuration and model -----
  CudaBackendConfig config;
  model::LlamaConfig c;
  KvGroups kv_groups;  // one group for the llama family; gemma3's global and sliding groups
  ActType act = ActType::kF16;
  std::string device_name;

  // ----- device state -----
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  DeviceAllocations allocations;
  DeviceWeights device_weights;
  KvCache kv_cache;
  KvHostMirror kv_mirror;  // config.kv_host_mirror: the KV transport's view of the KV
  ForwardScratch scratch;
  void* device_out = nullptr;  // [S] ids, [S] logprobs, [S][20] top ids, [S][20] top logprobs
  void* device_in = nullptr;
  size_t device_in_bytes = 0;
  // The current step's inputs inside device_in (set by enqueue_forward).
  DeviceStepInputs step_inputs;

  // ----- pinned slots and the poll thread -----
  StepCompletions completions;

  Impl(model::LlamaWeights weights, const CudaBackendConfig& cfg);
  ~Impl();
  void initialize(const model::LlamaWeights& w);  // the constructor's device work
  void allocate_scratch();
  void release();                                 // frees every device and pinned resource

  ForwardContext forward_context() const;
  // Grows the slot's pinned and the device input buffers to hold `bytes`.
  void reserve_inputs(StepSlot& slot, size_t bytes);
  // Packs inputs, copies them, runs the forward pass; returns the sampling rows.
  std::vector<SamplingRow> enqueue_forward(const StepBatch& b, int slot);
  void enqueue_sampling(const std::vector<SamplingRow>& rows, int slot);
};

CudaBackend::Impl::Impl(model::LlamaWeights weights, const CudaBackendConfig& cfg)
    : config(cfg), c(weights.config()), kv_groups(KvGroups::of(c)) {
  if (config.block_size <= 0 || config.max_num_batched_tokens <= 0 || config.max_num_seqs <= 0) {
    throw std::invalid_argument("CUDA backend: block_size, max_num_batched_tokens and max_num_seqs must be positive");
  }
  if (c.qkv_bias) throw std::invalid_argument("CUDA backend: QKV bias (qwen2) is not supported yet; use --backend cpu");
  if (c.head_dim % 32 != 0 || (c.head_dim > 128 && c.head_dim != 256)) {
    throw std::invalid_argument("CUDA backend: head_dim " + std::to_string(c.head_dim) +
                                " is not supported (32, 64, 96, 128, 256)");
  }
  if (config.kv_host_mirror && kv_groups.num_groups > 1) {
    // As on the CPU backend: a transfer moves one block table's pages, a sequence of a
    // sliding-window model has one per KV group.
    throw std::invalid_argument("CUDA backend: KV transfer (disaggregated prefill/decode) does "
                                "not carry the KV groups of " + c.architecture +
                                "'s sliding-window layers yet");
  }
  if (c.n_head % c.n_head_kv != 0 || c.n_head / c.n_head_kv > 8) {
    throw std::invalid_argument("CUDA backend: GQA group n_head / n_head_kv must be <= 8");
  }
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  if (config.device < 0 || config.device >= count) {
    throw std::invalid_argument("CUDA backend: device " + std::to_string(config.device) + " does not exist");
  }
  CUDA_CHECK(cudaSetDevice(config.device));
  try {
    initialize(weights);
  } catch (...) {
    release();  // a failed start-up (out of memory, no KV room) leaves nothing allocated
    throw;
  }
  completions.start(config.device, c.n_vocab);
}

void CudaBackend::Impl::initialize(const model::LlamaWeights& w) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, config.device));
  device_name = prop.name;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&cublas));
  CUBLAS_CHECK(cublasSetStream(cublas, stream));

  act = config.compute_type.value_or(w.layers().front().wq.type == model::TensorType::kBF16
                                         ? ActType::kBF16 : ActType::kF16);
  device_weights = upload_weights(w, act, stream, allocations);
  allocate_scratch();
  kv_cache = allocate_kv_cache(c, config, kv_groups, allocations);
  if (config.kv_host_mirror) kv_mirror = KvHostMirror::allocate(kv_cache, c, config.block_size);
}

void CudaBackend::Impl::allocate_scratch() {
  const size_t T = static_cast<size_t>(config.max_num_batched_tokens);
  const size_t S = static_cast<size_t>(config.max_num_seqs);
  const size_t E = c.n_embd, F = c.n_ff, Q = c.q_dim(), W = c.q_dim() + 2 * c.kv_dim(), V = c.n_vocab;
  scratch.x = allocations.allocate<float>(T * E * 4);
  scratch.h = allocations.allocate(T * std::max(E, Q) * 2);
  scratch.qkv = allocations.allocate<float>(T * W * 4);
  scratch.attn = allocations.allocate(T * Q * 2);
  scratch.gate_up = allocations.allocate<float>(T * 2 * F * 4);
  if (c.post_norms) scratch.tmp = allocations.allocate<float>(T * E * 4);
  scratch.ff = allocations.allocate(T * F * 2);
  scratch.logits = allocations.allocate<float>(S * V * 4);
  scratch.workspace = allocations.allocate<float>(S * V * 4);
  device_out = allocations.allocate(S * (2 + 2 * kMaxTopLogprobs) * 4);
  device_in_bytes = 1 << 20;
  device_in = allocations.allocate(device_in_bytes);
  for (StepSlot& s : completions.slots) {
    CUDA_CHECK(cudaMallocHost(&s.host_in, device_in_bytes));
    s.host_in_bytes = device_in_bytes;
    CUDA_CHECK(cudaMallocHost(&s.host_out, S * (2 + 2 * kMaxTopLogprobs) * 4));
    CUDA_CHECK(cudaEventCreate(&s.start));
    CUDA_CHECK(cudaEventCreate(&s.done));
  }
}

CudaBackend::Impl::~Impl() {
  completions.stop();  // completes every launched step first
  release();
}

void CudaBackend::Impl::release() {
  if (stream != nullptr) cudaStreamSynchronize(stream);
  for (StepSlot& s : completions.slots) {
    if (s.host_in != nullptr) cudaFreeHost(s.host_in);
    if (s.host_out != nullptr) cudaFreeHost(s.host_out);
    if (s.start != nullptr) cudaEventDestroy(s.start);
    if (s.done != nullptr) cudaEventDestroy(s.done);
    s = StepSlot{};
  }
  kv_mirror = KvHostMirror();  // before the KV it mirrors (nothing may copy to freed memory)
  allocations.free_all();
  if (cublas != nullptr) cublasDestroy(cublas);
  if (stream != nullptr) cudaStreamDestroy(stream);
  cublas = nullptr;
  stream = nullptr;
}

ForwardContext CudaBackend::Impl::forward_context() const {
  ForwardContext ctx;
  ctx.model = &c;
  ctx.block_size = config.block_size;
  ctx.act = act;
  ctx.stream = stream;
  ctx.cublas = cublas;
  ctx.weights = &device_weights;
  ctx.kv_cache = &kv_cache;
  ctx.kv_groups = &kv_groups;
  ctx.scratch = &scratch;
  ctx.observer = &config.observer;
  return ctx;
}

void CudaBackend::Impl::reserve_inputs(StepSlot& slot, size_t bytes) {
  // Grow the pinned and device input buffers when a step needs more (rare; cudaFree synchronizes).
  if (bytes > slot.host_in_bytes) {
    CUDA_CHECK(cudaFreeHost(slot.host_in));
    slot.host_in = nullptr;
    const size_t new_bytes = std::max(bytes, 2 * slot.host_in_bytes);
    CUDA_CHECK(cudaMallocHost(&slot.host_in, new_bytes));
    slot.host_in_bytes = new_bytes;
  }
  if (bytes > device_in_bytes) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    allocations.free_one(device_in);
    device_in_bytes = std::max(bytes, 2 * device_in_bytes);
    device_in = allocations.allocate(device_in_bytes);
  }
}

std::vector<SamplingRow> CudaBackend::Impl::enqueue_forward(const StepBatch& b, int slot_index) {
  StepSlot& slot = completions.slots[slot_index];
  std::vector<SamplingRow> rows = collect_sampling_rows(b);
  const int32_t T = b.num_tokens();
  const int32_t S = static_cast<int32_t>(rows.size());
  const InputLayout in = input_layout(b, S);
  reserve_inputs(slot, in.total);
  pack_step_inputs(b, rows, in, config.block_size, slot.host_in);

  CUDA_CHECK(cudaEventRecord(slot.start, stream));
  // KV pulled from another server into the host mirror goes in before anything reads it.
  kv_mirror.upload(b.kv_blocks_from_host, stream);
  CUDA_CHECK(cudaMemcpyAsync(device_in, slot.host_in, in.total, cudaMemcpyHostToDevice, stream));
  step_inputs = device_step_inputs(device_in, in);
  enqueue_forward_pass(forward_context(), step_inputs, T, S, b.max_blocks_per_seq);
  // ... and what this step wrote goes out, before the step's completion event: a request that
  // finishes with this step has its KV in host memory when a decode server comes for it.
  if (!kv_mirror.empty()) kv_mirror.download(blocks_written_by(b, config.block_size), stream);
  return rows;
}

void CudaBackend::Impl::enqueue_sampling(const std::vector<SamplingRow>& rows, int slot_index) {
  StepSlot& slot = completions.slots[slot_index];
  const int32_t S = static_cast<int32_t>(rows.size());
  if (S > 0) {
    int32_t* out = static_cast<int32_t*>(device_out);
    sample_rows(SamplingArgs{.logits = scratch.logits, .num_rows = S, .n_vocab = c.n_vocab,
                             .params = step_inputs.params, .recent_tokens = step_inputs.recent,
                             .bias_ids = step_inputs.bias_ids,
                             .bias_values = step_inputs.bias_values,
                             .end_token_ids = step_inputs.end_ids,
                             .bitmask = step_inputs.bitmask,
                             .bitmask_num_words = step_inputs.bitmask_num_words,
                             .bitmask_rows = step_inputs.bitmask_rows,
                             .workspace = scratch.workspace,
                             .out_tokens = out,
                             .out_logprobs = reinterpret_cast<float*>(out + S),
                             .out_top_ids = out + 2 * S,
                             .out_top_logprobs =
                                 reinterpret_cast<float*>(out + 2 * S + S * kMaxTopLogprobs)},
                stream);
    CUDA_CHECK(cudaMemcpyAsync(slot.host_out, device_out, static_cast<size_t>(S) * (2 + 2 * kMaxTopLogprobs) * 4,
                               cudaMemcpyDeviceToHost, stream));
  }
  CUDA_CHECK(cudaEventRecord(slot.done, stream));
}


// ----- CudaBackend -----

CudaBackend::CudaBackend(model::LlamaWeights weights, const CudaBackendConfig& config)
    : impl_(std::make_unique<Impl>(std::move(weights), config)) {}

CudaBackend::~CudaBackend() = default;

std::unique_ptr<CudaBackend> CudaBackend::from_gguf(std::shared_ptr<const model::GgufFile> file,
                                                    const CudaBackendConfig& config) {
  return std::make_unique<CudaBackend>(model::LlamaWeights::from_gguf(std::move(file)), config);
}

KvCacheGeometry CudaBackend::kv_geometry() const {
  KvCacheGeometry g;
  g.num_blocks = impl_->kv_cache.num_blocks;
  g.block_size = impl_->config.block_size;
  g.bytes = impl_->kv_cache.bytes;
  g.num_kv_groups = impl_->kv_groups.num_groups;
  g.sliding_window = impl_->kv_groups.sliding_window;
  g.layers_per_group = impl_->kv_groups.layers_per_group;
  g.dtype = impl_->config.kv_dtype;
  return g;
}

std::optional<KvHostMemory> CudaBackend::kv_host_memory() {
  // The host mirror copies each layer's blocks of one table (kv_host_mirror.hpp); a model with
  // KV groups keeps its pages per layer slot and group, which it does not mirror: no P/D here.
  if (impl_->kv_mirror.empty() || impl_->kv_groups.num_groups > 1) return std::nullopt;
  return impl_->kv_mirror.memory();
}

void CudaBackend::launch(StepBatch batch, Completion done) {
  Impl& m = *impl_;
  PendingStep p;
  p.step_id = batch.step_id;
  p.done = std::move(done);
  int slot = -1;
  try {
    CUDA_CHECK(cudaSetDevice(m.config.device));
    validate_batch(batch, m.config, m.c.n_vocab, m.kv_cache.num_blocks, m.kv_groups);
    slot = m.completions.acquire_slot();
    const std::vector<SamplingRow> rows = m.enqueue_forward(batch, slot);
    m.enqueue_sampling(rows, slot);
    for (const SamplingRow& r : rows) {
      p.seq_ids.push_back(r.seq_id);
      const model::SamplingParams& sp = r.slot->params;
      p.want_logprob.push_back(sp.logprobs || sp.top_logprobs > 0);
      p.num_top.push_back(std::clamp(sp.top_logprobs, 0, kMaxTopLogprobs));
    }
    p.slot = slot;
  } catch (const std::exception& e) {
    if (slot >= 0) m.completions.release_slot(slot);  // nothing of it will be read
    p.error = e.what();
  }
  m.completions.push(std::move(p));
}

StepResult CudaBackend::run_step(const StepBatch& batch) {
  std::promise<StepOutcome> promise;
  std::future<StepOutcome> future = promise.get_future();
  launch(batch, [&promise](StepOutcome o) { promise.set_value(std::move(o)); });
  StepOutcome outcome = future.get();
  if (!outcome.ok()) throw std::runtime_error(outcome.error);
  return std::move(outcome.result);
}

std::vector<float> CudaBackend::compute_logits(const StepBatch& batch) {
  Impl& m = *impl_;
  CUDA_CHECK(cudaSetDevice(m.config.device));
  validate_batch(batch, m.config, m.c.n_vocab, m.kv_cache.num_blocks, m.kv_groups);
  const int slot = m.completions.acquire_slot();
  std::vector<float> out;
  try {
    const std::vector<SamplingRow> rows = m.enqueue_forward(batch, slot);
    out.resize(rows.size() * static_cast<size_t>(m.c.n_vocab));
    CUDA_CHECK(cudaMemcpyAsync(out.data(), m.scratch.logits, out.size() * 4, cudaMemcpyDeviceToHost, m.stream));
    CUDA_CHECK(cudaStreamSynchronize(m.stream));
  } catch (...) {
    m.completions.release_slot(slot);
    throw;
  }
  m.completions.release_slot(slot);
  return out;
}

const model::LlamaConfig& CudaBackend::model_config() const { return impl_->c; }
ActType CudaBackend::compute_type() const { return impl_->act; }
std::string CudaBackend::device_name() const { return impl_->device_name; }
int64_t CudaBackend::gemm_weight_bytes() const { return impl_->device_weights.gemm_bytes; }
float CudaBackend::last_step_device_ms() const { return impl_->completions.last_device_ms(); }

}  // namespace troupe::gpu::cuda
