// CudaBackend: weight upload, KV sizing, step enqueue and the completion poll thread (see
// cuda_backend.hpp).
#include "gpu/cuda/cuda_backend.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "gpu/cuda/attention.cuh"
#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/dequantize.cuh"
#include "gpu/cuda/embedding.cuh"
#include "gpu/cuda/gemm.hpp"
#include "gpu/cuda/kv_write.cuh"
#include "gpu/cuda/rmsnorm.cuh"
#include "gpu/cuda/rope.cuh"
#include "gpu/cuda/sampling.cuh"
#include "gpu/cuda/silu_mul.cuh"

namespace troupe::gpu::cuda {
namespace {

constexpr int kNumSlots = 2;  // steps whose pinned buffers may be in flight at once
constexpr size_t kAlign = 256;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

[[noreturn]] void bad_batch(const std::string& what) {
  throw std::invalid_argument("StepBatch: " + what);
}

WeightType weight_type_of(const model::WeightView& v) {
  const auto id = static_cast<uint32_t>(v.type);
  if (!is_cuda_weight_type(id)) {
    throw std::invalid_argument("tensor " + v.name + ": type " +
                                std::string(model::tensor_type_name(v.type)) +
                                " is not supported by the CUDA backend yet; use --backend cpu");
  }
  return static_cast<WeightType>(id);
}

// Output rows of the step's sampling sequences (seqs order) and their sampling slots.
struct SamplingRow {
  uint64_t seq_id = 0;
  int32_t token_index = 0;  // last token of the span
  const SamplingSlot* slot = nullptr;
};

}  // namespace

struct CudaBackend::Impl {
  // ----- configuration and model -----
  CudaBackendConfig config;
  model::LlamaConfig c;
  ActType act = ActType::kF16;
  std::string device_name;
  int32_t num_blocks = 0;
  int64_t kv_bytes = 0;
  int64_t gemm_bytes = 0;

  // ----- device state -----
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  std::vector<void*> allocations;

  struct Layer {
    void* qkv = nullptr;      // [q_dim + 2 kv_dim][n_embd]
    void* wo = nullptr;       // [n_embd][q_dim]
    void* gate_up = nullptr;  // [2 n_ff][n_embd]
    void* down = nullptr;     // [n_embd][n_ff]
    float* attn_norm = nullptr;
    float* ffn_norm = nullptr;
    void* k_cache = nullptr;
    void* v_cache = nullptr;
  };
  std::vector<Layer> layers;
  void* embd_raw = nullptr;
  WeightType embd_type = WeightType::kF32;
  int64_t embd_row_bytes = 0;
  float* output_norm = nullptr;
  float* rope_freqs = nullptr;  // [n_rot / 2] RoPE frequency divisors, or nullptr (none)
  void* output = nullptr;  // [n_vocab][n_embd]

  // Scratch, sized for max_num_batched_tokens tokens and max_num_seqs sampling rows.
  float* x = nullptr;        // residual stream [T][E]
  void* h = nullptr;         // normed activations [T][E]
  float* qkv = nullptr;      // [T][Q + 2 KV]
  void* attn = nullptr;      // [T][Q]
  float* gate_up = nullptr;  // [T][2F]
  void* ff = nullptr;        // [T][F]
  float* logits = nullptr;   // [S][V]
  float* workspace = nullptr;  // [S][V]
  void* device_out = nullptr;  // [S] ids, [S] logprobs, [S][20] top ids, [S][20] top logprobs
  void* device_in = nullptr;
  size_t device_in_bytes = 0;
  // The current step's sampling inputs inside device_in (set by enqueue_forward).
  const SamplingRowParams* step_params = nullptr;
  const int32_t* step_recent = nullptr;
  const int32_t* step_bias_ids = nullptr;
  const float* step_bias_values = nullptr;
  const int32_t* step_end_ids = nullptr;

  // ----- pinned slots and the poll thread -----
  struct Slot {
    void* host_in = nullptr;
    size_t host_in_bytes = 0;
    void* host_out = nullptr;
    cudaEvent_t start = nullptr;
    cudaEvent_t done = nullptr;
    bool busy = false;
  };
  Slot slots[kNumSlots];
  int next_slot = 0;

  struct Pending {
    uint64_t step_id = 0;
    int slot = -1;
    std::string error;
    std::vector<uint64_t> seq_ids;
    std::vector<int32_t> want_logprob;
    std::vector<int32_t> num_top;
    Completion done;
  };
  std::mutex mutex;
  std::condition_variable pending_cv;
  std::condition_variable slot_cv;
  std::deque<Pending> pending;
  bool stopping = false;
  std::thread poller;
  std::atomic<float> last_device_ms{0.0f};

  // Offsets of one step's inputs inside the packed buffer.
  struct InputLayout {
    size_t token_ids, positions, table_rows, slots, sample_rows, block_tables, recent, params;
    size_t bias_ids, bias_values, end_ids, total;  // logit_bias and the min_tokens mask
  };

  Impl(model::LlamaWeights weights, const CudaBackendConfig& cfg);
  ~Impl();
  void initialize(const model::LlamaWeights& w);  // the constructor's device work
  void release();                                 // frees every device and pinned resource

  template <typename T = void>
  T* allocate(size_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
    allocations.push_back(p);
    return static_cast<T*>(p);
  }
  void upload_projection(const std::vector<const model::WeightView*>& parts, void* dst,
                         void* staging);
  float* upload_f32(const model::WeightView& v);
  void allocate_kv();
  void validate(const StepBatch& b) const;
  InputLayout layout(const StepBatch& b, int32_t num_rows) const;
  int acquire_slot();
  void release_slot(int slot);
  // Packs inputs, copies them, runs the forward pass; returns the sampling rows.
  std::vector<SamplingRow> enqueue_forward(const StepBatch& b, int slot);
  void enqueue_sampling(const std::vector<SamplingRow>& rows, int slot);
  void poll_loop();
};

CudaBackend::Impl::Impl(model::LlamaWeights weights, const CudaBackendConfig& cfg)
    : config(cfg), c(weights.config()) {
  if (config.block_size <= 0 || config.max_num_batched_tokens <= 0 || config.max_num_seqs <= 0) {
    throw std::invalid_argument("CUDA backend: block_size, max_num_batched_tokens and max_num_seqs must be positive");
  }
  if (c.qkv_bias) throw std::invalid_argument("CUDA backend: QKV bias (qwen2) is not supported yet; use --backend cpu");
  if (c.head_dim % 32 != 0 || c.head_dim > 128) {
    throw std::invalid_argument("CUDA backend: head_dim " + std::to_string(c.head_dim) + " is not supported (32, 64, 96, 128)");
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
  poller = std::thread([this] { poll_loop(); });
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

  // Weights: one staging buffer for the raw bytes of the largest matrix that needs converting.
  size_t staging_bytes = 0;
  for (const model::LlamaLayerWeights& l : w.layers()) {
    for (const model::WeightView* v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      staging_bytes = std::max<size_t>(staging_bytes, v->num_bytes);
    }
  }
  if (w.output().data != w.token_embd().data) staging_bytes = std::max<size_t>(staging_bytes, w.output().num_bytes);
  void* staging = nullptr;
  CUDA_CHECK(cudaMalloc(&staging, std::max<size_t>(staging_bytes, 1)));
  try {
    const int64_t E = c.n_embd, F = c.n_ff, Q = c.q_dim(), KV = c.kv_dim();
    for (const model::LlamaLayerWeights& l : w.layers()) {
      Layer L;
      L.qkv = allocate((Q + 2 * KV) * E * 2);
      upload_projection({&l.wq, &l.wk, &l.wv}, L.qkv, staging);
      L.wo = allocate(E * Q * 2);
      upload_projection({&l.wo}, L.wo, staging);
      L.gate_up = allocate(2 * F * E * 2);
      upload_projection({&l.w_gate, &l.w_up}, L.gate_up, staging);
      L.down = allocate(E * F * 2);
      upload_projection({&l.w_down}, L.down, staging);
      L.attn_norm = upload_f32(l.attn_norm);
      L.ffn_norm = upload_f32(l.ffn_norm);
      gemm_bytes += ((Q + 2 * KV) * E + E * Q + 2 * F * E + E * F) * 2;
      layers.push_back(L);
    }
    const model::WeightView& embd = w.token_embd();
    embd_type = weight_type_of(embd);
    embd_row_bytes = static_cast<int64_t>(model::row_bytes(embd.type, static_cast<uint64_t>(E)));
    embd_raw = allocate(embd.num_bytes);
    CUDA_CHECK(cudaMemcpy(embd_raw, embd.data, embd.num_bytes, cudaMemcpyHostToDevice));
    output_norm = upload_f32(w.output_norm());
    if (w.rope_freqs()) rope_freqs = upload_f32(*w.rope_freqs());
    output = allocate(static_cast<size_t>(c.n_vocab) * E * 2);
    if (w.output().data == embd.data) {  // tied: convert the copy already on the device
      dequantize_matrix(embd_raw, embd_type, c.n_vocab, E, output, act, stream);
    } else {
      upload_projection({&w.output()}, output, staging);
    }
    gemm_bytes += static_cast<int64_t>(c.n_vocab) * E * 2;
    CUDA_CHECK(cudaStreamSynchronize(stream));
  } catch (...) {
    cudaFree(staging);
    throw;
  }
  CUDA_CHECK(cudaFree(staging));

  // Scratch.
  const size_t T = static_cast<size_t>(config.max_num_batched_tokens);
  const size_t S = static_cast<size_t>(config.max_num_seqs);
  const size_t E = c.n_embd, F = c.n_ff, Q = c.q_dim(), W = c.q_dim() + 2 * c.kv_dim(), V = c.n_vocab;
  x = allocate<float>(T * E * 4);
  h = allocate(T * std::max(E, Q) * 2);
  qkv = allocate<float>(T * W * 4);
  attn = allocate(T * Q * 2);
  gate_up = allocate<float>(T * 2 * F * 4);
  ff = allocate(T * F * 2);
  logits = allocate<float>(S * V * 4);
  workspace = allocate<float>(S * V * 4);
  device_out = allocate(S * (2 + 2 * kMaxTopLogprobs) * 4);
  device_in_bytes = 1 << 20;
  device_in = allocate(device_in_bytes);
  for (Slot& s : slots) {
    CUDA_CHECK(cudaMallocHost(&s.host_in, device_in_bytes));
    s.host_in_bytes = device_in_bytes;
    CUDA_CHECK(cudaMallocHost(&s.host_out, S * (2 + 2 * kMaxTopLogprobs) * 4));
    CUDA_CHECK(cudaEventCreate(&s.start));
    CUDA_CHECK(cudaEventCreate(&s.done));
  }
  allocate_kv();
}

CudaBackend::Impl::~Impl() {
  {
    std::lock_guard lock(mutex);
    stopping = true;
  }
  pending_cv.notify_all();
  if (poller.joinable()) poller.join();  // completes every launched step first
  release();
}

void CudaBackend::Impl::release() {
  if (stream != nullptr) cudaStreamSynchronize(stream);
  for (Slot& s : slots) {
    if (s.host_in != nullptr) cudaFreeHost(s.host_in);
    if (s.host_out != nullptr) cudaFreeHost(s.host_out);
    if (s.start != nullptr) cudaEventDestroy(s.start);
    if (s.done != nullptr) cudaEventDestroy(s.done);
    s = Slot{};
  }
  for (void* p : allocations) cudaFree(p);
  allocations.clear();
  if (cublas != nullptr) cublasDestroy(cublas);
  if (stream != nullptr) cudaStreamDestroy(stream);
  cublas = nullptr;
  stream = nullptr;
}

void CudaBackend::Impl::upload_projection(const std::vector<const model::WeightView*>& parts,
                                          void* dst, void* staging) {
  int64_t row = 0;
  for (const model::WeightView* v : parts) {
    const WeightType type = weight_type_of(*v);
    char* out = static_cast<char*>(dst) + row * v->num_inputs * 2;
    const bool same = (type == WeightType::kF16 && act == ActType::kF16) ||
                      (type == WeightType::kBF16 && act == ActType::kBF16);
    if (same) {
      CUDA_CHECK(cudaMemcpy(out, v->data, v->num_bytes, cudaMemcpyHostToDevice));
    } else {
      // cudaMemcpy from pageable memory returns once the source is consumed, so the staging
      // buffer is free again when the (stream-ordered) conversion of the previous part is done.
      CUDA_CHECK(cudaStreamSynchronize(stream));
      CUDA_CHECK(cudaMemcpy(staging, v->data, v->num_bytes, cudaMemcpyHostToDevice));
      dequantize_matrix(staging, type, v->num_outputs, v->num_inputs, out, act, stream);
    }
    row += v->num_outputs;
  }
}

float* CudaBackend::Impl::upload_f32(const model::WeightView& v) {
  if (v.type != model::TensorType::kF32) throw std::invalid_argument("tensor " + v.name + ": expected F32");
  float* p = allocate<float>(v.num_bytes);
  CUDA_CHECK(cudaMemcpy(p, v.data, v.num_bytes, cudaMemcpyHostToDevice));
  return p;
}

void CudaBackend::Impl::allocate_kv() {
  const int64_t per_block = static_cast<int64_t>(c.n_layer) * 2 * c.n_head_kv * config.block_size * c.head_dim * 2;
  int64_t blocks = config.num_blocks;
  if (blocks <= 0) {
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const int64_t used = static_cast<int64_t>(total_bytes - free_bytes);
    const int64_t reserve = 256ll << 20;  // cuBLAS workspaces, allocator slack
    const int64_t budget = static_cast<int64_t>(config.gpu_memory_utilization * static_cast<double>(total_bytes)) - used - reserve;
    blocks = budget / per_block;
    if (blocks <= 0) {
      throw std::invalid_argument("CUDA backend: gpu_memory_utilization " + std::to_string(config.gpu_memory_utilization) +
                                  " leaves no memory for KV blocks after the weights (" + std::to_string(used >> 20) + " MiB in use)");
    }
    blocks = std::min<int64_t>(blocks, 1 << 30);
  }
  num_blocks = static_cast<int32_t>(blocks);
  kv_bytes = per_block * num_blocks;
  char* kv = allocate<char>(static_cast<size_t>(kv_bytes));
  const size_t side = static_cast<size_t>(num_blocks) * c.n_head_kv * config.block_size * c.head_dim * 2;
  for (int32_t l = 0; l < c.n_layer; ++l) {
    layers[l].k_cache = kv + side * 2 * l;
    layers[l].v_cache = kv + side * (2 * l + 1);
  }
}

void CudaBackend::Impl::validate(const StepBatch& b) const {
  const int32_t T = b.num_tokens();
  if (T == 0) bad_batch("no tokens");
  if (T > config.max_num_batched_tokens) {
    bad_batch(std::to_string(T) + " tokens; the CUDA backend was sized for max_num_batched_tokens " +
              std::to_string(config.max_num_batched_tokens));
  }
  if (b.positions.size() != b.token_ids.size()) bad_batch("positions and token_ids differ in size");
  if (b.max_blocks_per_seq < 0 || b.block_tables.size() < b.seqs.size() * static_cast<size_t>(b.max_blocks_per_seq)) {
    bad_batch("block_tables smaller than seqs x max_blocks_per_seq");
  }
  for (int32_t id : b.token_ids) {
    if (id < 0 || id >= c.n_vocab) bad_batch("token id " + std::to_string(id) + " out of vocabulary");
  }
  int64_t covered = 0, rows = 0;
  for (const SequenceSlice& q : b.seqs) {
    const std::string who = "seq " + std::to_string(q.seq_id) + ": ";
    if (q.num_tokens <= 0 || q.token_offset < 0 || q.token_offset + q.num_tokens > T) bad_batch(who + "token span out of range");
    covered += q.num_tokens;
    if (q.context_len < q.num_tokens) bad_batch(who + "context_len < num_tokens");
    if (q.block_table_row < 0 || static_cast<size_t>(q.block_table_row) >= b.seqs.size()) bad_batch(who + "block_table_row out of range");
    const int32_t needed = (q.context_len + config.block_size - 1) / config.block_size;
    if (needed > b.max_blocks_per_seq) bad_batch(who + "context needs more blocks than the table row");
    const int32_t* row = b.block_tables.data() + static_cast<size_t>(q.block_table_row) * b.max_blocks_per_seq;
    for (int32_t i = 0; i < needed; ++i) {
      if (row[i] < 0 || row[i] >= num_blocks) bad_batch(who + "block id " + std::to_string(row[i]) + " out of range");
    }
    for (int32_t i = 0; i < q.num_tokens; ++i) {
      if (b.positions[q.token_offset + i] != q.context_len - q.num_tokens + i) bad_batch(who + "positions do not match context_len");
    }
    if (q.sample) {
      if (q.sampling_index < 0 || static_cast<size_t>(q.sampling_index) >= b.sampling.size()) bad_batch(who + "sampling_index out of range");
      ++rows;
    }
  }
  if (covered != T) bad_batch("sequence spans do not cover token_ids exactly");
  if (rows > config.max_num_seqs) {
    bad_batch(std::to_string(rows) + " sampling rows; the CUDA backend was sized for max_num_seqs " + std::to_string(config.max_num_seqs));
  }
  for (const SamplingSlot& slot : b.sampling) {
    if (slot.recent_offset < 0 || slot.recent_count < 0 ||
        static_cast<size_t>(slot.recent_offset) + slot.recent_count > b.recent_tokens.size()) {
      bad_batch("sampling slot recent window out of range");
    }
  }
}

CudaBackend::Impl::InputLayout CudaBackend::Impl::layout(const StepBatch& b, int32_t num_rows) const {
  const size_t T = b.token_ids.size();
  InputLayout l{};
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off = align_up(off + bytes);
    return at;
  };
  l.token_ids = take(4 * T);
  l.positions = take(4 * T);
  l.table_rows = take(4 * T);
  l.slots = take(4 * T);
  l.sample_rows = take(4 * static_cast<size_t>(num_rows));
  l.block_tables = take(4 * b.block_tables.size());
  l.recent = take(4 * b.recent_tokens.size());
  l.params = take(sizeof(SamplingRowParams) * static_cast<size_t>(num_rows));
  size_t num_bias = 0, num_end = 0;
  for (const SamplingSlot& slot : b.sampling) {
    num_bias += slot.params.logit_bias.size();
    if (slot.masks_end_tokens()) num_end += slot.end_token_ids.size();
  }
  l.bias_ids = take(4 * num_bias);
  l.bias_values = take(4 * num_bias);
  l.end_ids = take(4 * num_end);
  l.total = off;
  return l;
}

int CudaBackend::Impl::acquire_slot() {
  std::unique_lock lock(mutex);
  const int s = next_slot;
  // Waits only when the caller runs more than kNumSlots steps ahead of the device.
  slot_cv.wait(lock, [&] { return !slots[s].busy; });
  slots[s].busy = true;
  next_slot = (next_slot + 1) % kNumSlots;
  return s;
}

void CudaBackend::Impl::release_slot(int s) {
  {
    std::lock_guard lock(mutex);
    slots[s].busy = false;
  }
  slot_cv.notify_all();
}

std::vector<SamplingRow> CudaBackend::Impl::enqueue_forward(const StepBatch& b, int slot_index) {
  Slot& slot = slots[slot_index];
  std::vector<SamplingRow> rows;
  for (const SequenceSlice& s : b.seqs) {
    if (s.sample) rows.push_back({s.seq_id, s.token_offset + s.num_tokens - 1, &b.sampling[s.sampling_index]});
  }
  const int32_t T = b.num_tokens();
  const int32_t S = static_cast<int32_t>(rows.size());
  const InputLayout in = layout(b, S);

  // Grow the pinned and device input buffers when a step needs more (rare; cudaFree synchronizes).
  if (in.total > slot.host_in_bytes) {
    CUDA_CHECK(cudaFreeHost(slot.host_in));
    slot.host_in = nullptr;
    const size_t bytes = std::max(in.total, 2 * slot.host_in_bytes);
    CUDA_CHECK(cudaMallocHost(&slot.host_in, bytes));
    slot.host_in_bytes = bytes;
  }
  if (in.total > device_in_bytes) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    auto it = std::find(allocations.begin(), allocations.end(), device_in);
    CUDA_CHECK(cudaFree(device_in));
    allocations.erase(it);
    device_in_bytes = std::max(in.total, 2 * device_in_bytes);
    device_in = allocate(device_in_bytes);
  }

  // Pack the inputs.
  char* host = static_cast<char*>(slot.host_in);
  auto host_i32 = [&](size_t offset) { return reinterpret_cast<int32_t*>(host + offset); };
  std::memcpy(host + in.token_ids, b.token_ids.data(), 4 * static_cast<size_t>(T));
  std::memcpy(host + in.positions, b.positions.data(), 4 * static_cast<size_t>(T));
  int32_t* table_rows = host_i32(in.table_rows);
  int32_t* slot_mapping = host_i32(in.slots);
  for (const SequenceSlice& s : b.seqs) {
    const int32_t* table = b.block_tables.data() + static_cast<size_t>(s.block_table_row) * b.max_blocks_per_seq;
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      const int32_t t = s.token_offset + i, pos = b.positions[t];
      table_rows[t] = s.block_table_row;
      slot_mapping[t] = table[pos / config.block_size] * config.block_size + pos % config.block_size;
    }
  }
  int32_t* sample_rows = host_i32(in.sample_rows);
  auto* params = reinterpret_cast<SamplingRowParams*>(host + in.params);
  int32_t* bias_ids = host_i32(in.bias_ids);
  auto* bias_values = reinterpret_cast<float*>(host + in.bias_values);
  int32_t* end_ids = host_i32(in.end_ids);
  int32_t num_bias = 0, num_end = 0;
  for (int32_t r = 0; r < S; ++r) {
    sample_rows[r] = rows[r].token_index;
    const SamplingSlot& slot_in = *rows[r].slot;
    const model::SamplingParams& p = slot_in.params;
    SamplingRowParams q;
    q.seed = p.seed;
    q.temperature = p.temperature;
    q.top_k = p.top_k;
    q.top_p = p.top_p;
    q.min_p = p.min_p;
    q.repetition_penalty = p.repetition_penalty;
    q.presence_penalty = p.presence_penalty;
    q.frequency_penalty = p.frequency_penalty;
    q.penalty_last_n = p.penalty_last_n;
    q.num_generated = slot_in.num_generated;
    q.recent_offset = slot_in.recent_offset;
    q.recent_count = slot_in.recent_count;
    q.num_top_logprobs = std::clamp(p.top_logprobs, 0, kMaxTopLogprobs);
    q.want_logprob = (p.logprobs || p.top_logprobs > 0) ? 1 : 0;
    q.bias_offset = num_bias;
    q.bias_count = static_cast<int32_t>(p.logit_bias.size());
    for (const model::LogitBias& e : p.logit_bias) {
      bias_ids[num_bias] = e.token_id;
      bias_values[num_bias++] = e.bias;
    }
    q.end_offset = num_end;
    q.end_count = slot_in.masks_end_tokens() ? static_cast<int32_t>(slot_in.end_token_ids.size()) : 0;
    for (int32_t i = 0; i < q.end_count; ++i) end_ids[num_end++] = slot_in.end_token_ids[i];
    params[r] = q;
  }
  if (!b.block_tables.empty()) std::memcpy(host + in.block_tables, b.block_tables.data(), 4 * b.block_tables.size());
  if (!b.recent_tokens.empty()) std::memcpy(host + in.recent, b.recent_tokens.data(), 4 * b.recent_tokens.size());

  CUDA_CHECK(cudaEventRecord(slot.start, stream));
  CUDA_CHECK(cudaMemcpyAsync(device_in, host, in.total, cudaMemcpyHostToDevice, stream));
  char* dev = static_cast<char*>(device_in);
  auto dev_i32 = [&](size_t offset) { return reinterpret_cast<const int32_t*>(dev + offset); };
  step_params = reinterpret_cast<const SamplingRowParams*>(dev + in.params);
  step_recent = dev_i32(in.recent);
  step_bias_ids = dev_i32(in.bias_ids);
  step_bias_values = reinterpret_cast<const float*>(dev + in.bias_values);
  step_end_ids = dev_i32(in.end_ids);

  const int64_t E = c.n_embd, F = c.n_ff, Q = c.q_dim(), KV = c.kv_dim(), W = Q + 2 * KV;
  embedding_gather(embd_raw, embd_type, embd_row_bytes, c.n_embd, dev_i32(in.token_ids), T, x, stream);
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers[l];
    RmsNormArgs norm;
    norm.x = x;
    norm.ld_x = E;
    norm.num_rows = T;
    norm.weight = L.attn_norm;
    norm.n = c.n_embd;
    norm.eps = c.rms_eps;
    norm.out_act = h;
    norm.act_type = act;
    norm.ld_out = E;
    rmsnorm_rows(norm, stream);
    gemm_rows(cublas, GemmArgs{act, L.qkv, h, E, qkv, W, T, static_cast<int32_t>(W), c.n_embd, 0.0f});

    RopeArgs rope;
    rope.qkv = qkv;
    rope.ld = W;
    rope.positions = dev_i32(in.positions);
    rope.num_tokens = T;
    rope.n_head = c.n_head;
    rope.n_head_kv = c.n_head_kv;
    rope.head_dim = c.head_dim;
    rope.n_rot = c.n_rot;
    rope.freq_base = c.rope_freq_base;
    rope.freq_scale = c.rope_freq_scale;
    rope.freq_factors = rope_freqs;
    rope.neox = c.rope_mode == model::RopeMode::kNeox;
    rope.round_q_to_f16 = true;  // queries meet fp16 keys as fp16, as on the CPU
    rope_inplace(rope, stream);

    KvWriteArgs kvw;
    kvw.qkv = qkv;
    kvw.ld = W;
    kvw.k_column = Q;
    kvw.v_column = Q + KV;
    kvw.slot_mapping = dev_i32(in.slots);
    kvw.num_tokens = T;
    kvw.n_head_kv = c.n_head_kv;
    kvw.head_dim = c.head_dim;
    kvw.block_size = config.block_size;
    kvw.k_cache = L.k_cache;
    kvw.v_cache = L.v_cache;
    kv_write(kvw, stream);

    AttentionArgs at;
    at.q = qkv;
    at.ld_q = W;
    at.k_cache = L.k_cache;
    at.v_cache = L.v_cache;
    at.positions = dev_i32(in.positions);
    at.token_table_row = dev_i32(in.table_rows);
    at.block_tables = dev_i32(in.block_tables);
    at.max_blocks_per_seq = b.max_blocks_per_seq;
    at.num_tokens = T;
    at.n_head = c.n_head;
    at.n_head_kv = c.n_head_kv;
    at.head_dim = c.head_dim;
    at.block_size = config.block_size;
    at.scale = c.attention_scale();
    at.out = attn;
    at.ld_out = Q;
    at.out_type = act;
    paged_attention(at, stream);
    gemm_rows(cublas, GemmArgs{act, L.wo, attn, Q, x, E, T, c.n_embd, static_cast<int32_t>(Q), 1.0f});

    norm.weight = L.ffn_norm;
    rmsnorm_rows(norm, stream);
    gemm_rows(cublas, GemmArgs{act, L.gate_up, h, E, gate_up, 2 * F, T, static_cast<int32_t>(2 * F), c.n_embd, 0.0f});
    silu_mul(gate_up, T, c.n_ff, ff, act, /*out_f32=*/false, stream);
    gemm_rows(cublas, GemmArgs{act, L.down, ff, F, x, E, T, c.n_embd, c.n_ff, 1.0f});
  }
  if (S > 0) {
    RmsNormArgs norm;
    norm.x = x;
    norm.ld_x = E;
    norm.row_index = dev_i32(in.sample_rows);
    norm.num_rows = S;
    norm.weight = output_norm;
    norm.n = c.n_embd;
    norm.eps = c.rms_eps;
    norm.out_act = h;
    norm.act_type = act;
    norm.ld_out = E;
    rmsnorm_rows(norm, stream);
    gemm_rows(cublas, GemmArgs{act, output, h, E, logits, c.n_vocab, S, c.n_vocab, c.n_embd, 0.0f});
  }
  return rows;
}

void CudaBackend::Impl::enqueue_sampling(const std::vector<SamplingRow>& rows, int slot_index) {
  Slot& slot = slots[slot_index];
  const int32_t S = static_cast<int32_t>(rows.size());
  if (S > 0) {
    int32_t* out = static_cast<int32_t*>(device_out);
    SamplingArgs sa;
    sa.logits = logits;
    sa.num_rows = S;
    sa.n_vocab = c.n_vocab;
    sa.params = step_params;
    sa.recent_tokens = step_recent;
    sa.bias_ids = step_bias_ids;
    sa.bias_values = step_bias_values;
    sa.end_token_ids = step_end_ids;
    sa.workspace = workspace;
    sa.out_tokens = out;
    sa.out_logprobs = reinterpret_cast<float*>(out + S);
    sa.out_top_ids = out + 2 * S;
    sa.out_top_logprobs = reinterpret_cast<float*>(out + 2 * S + S * kMaxTopLogprobs);
    sample_rows(sa, stream);
    CUDA_CHECK(cudaMemcpyAsync(slot.host_out, device_out, static_cast<size_t>(S) * (2 + 2 * kMaxTopLogprobs) * 4,
                               cudaMemcpyDeviceToHost, stream));
  }
  CUDA_CHECK(cudaEventRecord(slot.done, stream));
}

void CudaBackend::Impl::poll_loop() {
  cudaSetDevice(config.device);
  for (;;) {
    Pending p;
    {
      std::unique_lock lock(mutex);
      pending_cv.wait(lock, [&] { return stopping || !pending.empty(); });
      if (pending.empty()) return;  // stopping, and every launched step has completed
      p = std::move(pending.front());
      pending.pop_front();
    }
    StepOutcome outcome;
    outcome.result.step_id = p.step_id;
    if (!p.error.empty()) {
      outcome.error = p.error;
    } else {
      Slot& slot = slots[p.slot];
      // Spin (yielding) through a typical decode step, then back off: the thread must
      // not hold a core while a long prefill runs.
      const auto begin = std::chrono::steady_clock::now();
      cudaError_t status;
      while ((status = cudaEventQuery(slot.done)) == cudaErrorNotReady) {
        if (std::chrono::steady_clock::now() - begin < std::chrono::milliseconds(5)) {
          std::this_thread::yield();
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      }
      if (status != cudaSuccess) {
        outcome.error = std::string("CUDA error while running step ") + std::to_string(p.step_id) + ": " +
                        cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
      } else {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, slot.start, slot.done) == cudaSuccess) last_device_ms.store(ms);
        const int32_t S = static_cast<int32_t>(p.seq_ids.size());
        const int32_t* out = static_cast<const int32_t*>(slot.host_out);
        const float* logprobs = reinterpret_cast<const float*>(out + S);
        const int32_t* top_ids = out + 2 * S;
        const float* top_logprobs = reinterpret_cast<const float*>(out + 2 * S + S * kMaxTopLogprobs);
        outcome.result.tokens.resize(S);
        for (int32_t r = 0; r < S; ++r) {
          SampledToken& t = outcome.result.tokens[r];
          t.seq_id = p.seq_ids[r];
          t.token_id = out[r];
          if (p.want_logprob[r]) t.logprob = logprobs[r];
          const int32_t k = std::min(p.num_top[r], c.n_vocab);
          for (int32_t i = 0; i < k; ++i) {
            t.top_logprobs.push_back({top_ids[r * kMaxTopLogprobs + i], top_logprobs[r * kMaxTopLogprobs + i]});
          }
        }
      }
      release_slot(p.slot);
    }
    p.done(std::move(outcome));
  }
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
  g.num_blocks = impl_->num_blocks;
  g.block_size = impl_->config.block_size;
  g.bytes = impl_->kv_bytes;
  return g;
}

void CudaBackend::launch(StepBatch batch, Completion done) {
  Impl& m = *impl_;
  Impl::Pending p;
  p.step_id = batch.step_id;
  p.done = std::move(done);
  int slot = -1;
  try {
    CUDA_CHECK(cudaSetDevice(m.config.device));
    m.validate(batch);
    slot = m.acquire_slot();
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
    if (slot >= 0) m.release_slot(slot);  // nothing of it will be read
    p.error = e.what();
  }
  {
    std::lock_guard lock(m.mutex);
    m.pending.push_back(std::move(p));
  }
  m.pending_cv.notify_one();
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
  m.validate(batch);
  const int slot = m.acquire_slot();
  std::vector<float> out;
  try {
    const std::vector<SamplingRow> rows = m.enqueue_forward(batch, slot);
    out.resize(rows.size() * static_cast<size_t>(m.c.n_vocab));
    CUDA_CHECK(cudaMemcpyAsync(out.data(), m.logits, out.size() * 4, cudaMemcpyDeviceToHost, m.stream));
    CUDA_CHECK(cudaStreamSynchronize(m.stream));
  } catch (...) {
    m.release_slot(slot);
    throw;
  }
  m.release_slot(slot);
  return out;
}

const model::LlamaConfig& CudaBackend::model_config() const { return impl_->c; }
ActType CudaBackend::compute_type() const { return impl_->act; }
std::string CudaBackend::device_name() const { return impl_->device_name; }
int64_t CudaBackend::gemm_weight_bytes() const { return impl_->gemm_bytes; }
float CudaBackend::last_step_device_ms() const { return impl_->last_device_ms.load(); }

}  // namespace troupe::gpu::cuda
