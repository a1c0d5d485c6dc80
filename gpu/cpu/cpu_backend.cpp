// CpuBackend: step execution, sampling, and the compute thread behind launch().
#include "gpu/cpu/cpu_backend.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <span>
#include <stdexcept>

namespace troupe::gpu::cpu {
namespace {

ForwardConfig forward_config(const model::LlamaConfig& c, const CpuBackendConfig& config,
                             IsaLevel isa) {
  ForwardConfig f;
  f.block_size = config.block_size;
  f.isa = isa;
  f.observer = config.observer;
  f.prefill_attention = config.prefill_attention;
  f.kv_dtype = config.kv_dtype;
  // bf16 attention is worth having only where vdpbf16ps runs; elsewhere its scalar twin would
  // be slower than the exact kernels, so refuse rather than quietly slow down.
  if (config.prefill_attention == PrefillAttentionPrecision::kBf16 &&
      (isa != IsaLevel::kAvx512Vnni || !bf16_attention_supported())) {
    throw std::invalid_argument(
        "CPU backend: prefill_attention \"bf16\" needs a CPU with AVX512-BF16 (and the avx512 "
        "ISA level); this one runs \"exact\" only");
  }
  if (config.block_size <= 0) throw std::invalid_argument("CPU backend: block_size must be positive");
  f.num_blocks = config.num_blocks;
  if (f.num_blocks <= 0) {
    f.num_blocks = static_cast<int32_t>(config.kv_memory_bytes /
                                        LlamaForward::kv_bytes_per_block(c, config.block_size,
                                                                         config.kv_dtype));
  }
  if (f.num_blocks <= 0) throw std::invalid_argument("CPU backend: KV memory budget holds no block");
  return f;
}

LlamaForward make_forward(model::LlamaWeights weights, const CpuBackendConfig& config,
                          IsaLevel isa) {
  const ForwardConfig f = forward_config(weights.config(), config, isa);
  return LlamaForward(std::move(weights), f);
}

}  // namespace

CpuBackend::CpuBackend(model::LlamaWeights weights, const CpuBackendConfig& config)
    : isa_(config.isa.value_or(default_isa())),
      forward_(make_forward(std::move(weights), config, isa_)),
      pool_(config.num_threads),
      samplers_(pool_.num_threads()) {
  if (static_cast<int>(isa_) > static_cast<int>(supported_isa())) {
    throw std::invalid_argument("CPU backend: ISA level " + std::string(to_string(isa_)) +
                                " is not supported by this CPU");
  }
  dispatcher_ = std::thread([this] { dispatcher_loop(); });
  // Named so that a per-thread CPU account (bench/serve_bench.py --server-pid) can tell the
  // step thread (it also runs the pool's share 0) from the rest.
  pthread_setname_np(dispatcher_.native_handle(), "cpu-step");
}

CpuBackend::~CpuBackend() {
  {
    std::lock_guard lock(queue_mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  dispatcher_.join();
}

std::unique_ptr<CpuBackend> CpuBackend::from_gguf(std::shared_ptr<const model::GgufFile> file,
                                                  const CpuBackendConfig& config) {
  return std::make_unique<CpuBackend>(model::LlamaWeights::from_gguf(std::move(file)), config);
}

KvCacheGeometry CpuBackend::kv_geometry() const {
  KvCacheGeometry g;
  g.num_blocks = forward_.num_blocks();
  g.block_size = forward_.block_size();
  g.bytes = forward_.kv_bytes();
  g.num_kv_groups = forward_.kv_groups().num_groups;
  g.sliding_window = forward_.kv_groups().sliding_window;
  g.layers_per_group = forward_.kv_groups().layers_per_group;
  g.dtype = forward_.kv_dtype();
  return g;
}

std::optional<KvHostMemory> CpuBackend::kv_host_memory() {
  // With KV groups (gpu/kv_groups.hpp) the memory holds layers_per_group layer slots and a page
  // of any group is one block in each: moving a page copies it in every slot, whatever its group.
  const int32_t num_slots = forward_.kv_groups().layers_per_group;
  const KvLayerView layer0 = forward_.kv_slot(0);
  KvHostMemory m;
  m.base = reinterpret_cast<std::byte*>(layer0.k);
  m.bytes = forward_.kv_bytes();
  m.num_layers = num_slots;
  m.num_kv_heads = layer0.num_kv_heads;
  m.head_dim = layer0.head_dim;
  m.block_size = layer0.block_size;
  m.num_blocks = layer0.num_blocks;
  m.block_bytes = static_cast<int64_t>(layer0.block_elements()) * 2;  // 16-bit words
  m.dtype = layer0.dtype;
  m.kv_stride = reinterpret_cast<std::byte*>(layer0.v) - m.base;
  m.layer_stride = reinterpret_cast<std::byte*>(forward_.kv_slot(1 % num_slots).k) - m.base;
  if (num_slots == 1) m.layer_stride = 2 * m.kv_stride;
  return m;
}

std::vector<float> CpuBackend::compute_logits(const StepBatch& batch) {
  std::lock_guard lock(compute_mutex_);
  const std::vector<float>* logits = forward_.forward(batch, pool_);
  return logits ? *logits : std::vector<float>{};
}

StepOutcome CpuBackend::run_locked(const StepBatch& batch) {
  using Clock = std::chrono::steady_clock;
  const auto ms = [](Clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  };
  StepOutcome outcome;
  StepResult& result = outcome.result;
  result.step_id = batch.step_id;
  const std::vector<float>* computed = forward_.forward(batch, pool_);
  outcome.timings.layers_ms = forward_.last_layers_ms();
  outcome.timings.logits_ms = forward_.last_logits_ms();
  if (computed == nullptr) {
    outcome.interrupted = true;
    return outcome;
  }
  const Clock::time_point sampling_started = Clock::now();
  const std::vector<float>& logits = *computed;
  const int64_t V = forward_.config().n_vocab;
  // Each sampling slice's first logits row; with drafts it also owns that many more rows, and
  // as many places in result.tokens (compacted below to the tokens kept).
  struct Sampling {
    const SequenceSlice* slice;
    int64_t first_row;
    int32_t num_kept;
  };
  std::vector<Sampling> sampling;
  int64_t num_rows = 0;
  for (const SequenceSlice& s : batch.seqs) {
    if (!s.sample) continue;
    sampling.push_back({&s, num_rows, 1});
    num_rows += 1 + s.num_draft_tokens;
  }
  result.tokens.resize(static_cast<size_t>(num_rows));
  pool_.parallel_for(static_cast<int64_t>(sampling.size()), [&](int64_t b, int64_t e, int t) {
    for (int64_t i = b; i < e; ++i) {
      Sampling& job = sampling[static_cast<size_t>(i)];
      const SequenceSlice& s = *job.slice;
      const SamplingSlot& slot = batch.sampling[s.sampling_index];
      const int32_t* recent = batch.recent_tokens.data() + slot.recent_offset;
      SampledToken* out = result.tokens.data() + job.first_row;
      const float* rows = logits.data() + job.first_row * V;
      if (s.num_draft_tokens == 0) {
        *out = samplers_[t].sample(std::span<const float>(rows, static_cast<size_t>(V)), slot,
                                   std::span<const int32_t>(recent, static_cast<size_t>(slot.recent_count)),
                                   batch.bitmask_of(slot));
      } else {
        const auto num_rows_here = static_cast<size_t>(1 + s.num_draft_tokens);
        const std::span<const int32_t> drafts(
            batch.token_ids.data() + s.token_offset + s.num_tokens - s.num_draft_tokens,
            static_cast<size_t>(s.num_draft_tokens));
        const size_t window = slot.recent_count > 0 ? slot.recent_count + drafts.size() : 0;
        job.num_kept = samplers_[t].sample_verified(
            std::span<const float>(rows, num_rows_here * static_cast<size_t>(V)), V, slot,
            std::span<const int32_t>(recent, window), slot.recent_count, batch.bitmask_of(slot),
            drafts, std::span<SampledToken>(out, num_rows_here));
      }
      for (int32_t k = 0; k < job.num_kept; ++k) out[k].seq_id = s.seq_id;
    }
  });
  if (num_rows != static_cast<int64_t>(sampling.size())) {
    // Verify spans: keep each slice's accepted run, in order.
    size_t kept = 0;
    for (const Sampling& job : sampling) {
      for (int32_t k = 0; k < job.num_kept; ++k) {
        if (kept != static_cast<size_t>(job.first_row + k)) {
          result.tokens[kept] = std::move(result.tokens[static_cast<size_t>(job.first_row + k)]);
        }
        ++kept;
      }
    }
    result.tokens.resize(kept);
  }
  const Clock::time_point sampled = Clock::now();
  outcome.timings.sampling_ms = ms(sampled - sampling_started);
  prompt_outputs(batch, result);
  outcome.timings.prompt_outputs_ms = ms(Clock::now() - sampled);
  return outcome;
}

void CpuBackend::prompt_outputs(const StepBatch& batch, StepResult& result) {
  const std::vector<LlamaForward::PromptRows>& rows = forward_.prompt_rows();
  const int64_t E = forward_.config().n_embd;
  const int64_t V = forward_.config().n_vocab;
  // Scored rows' logits a chunk at a time: a 512-token prompt's rows at once would be 100 MB of
  // logits for a 49k vocabulary (and half a GB for Gemma's 262k).
  const int64_t chunk_rows = std::max<int64_t>(1, (int64_t{8} << 20) / V);
  for (size_t i = 0; i < batch.seqs.size() && i < rows.size(); ++i) {
    const SequenceSlice& s = batch.seqs[i];
    if (!s.has_prompt_outputs()) continue;
    const LlamaForward::PromptRows& r = rows[i];
    const float* base = forward_.prompt_hidden() + r.first_row * E;
    if (s.num_hidden > 0) {
      HiddenRows hidden{s.seq_id, s.hidden_begin, static_cast<int32_t>(E), {}};
      const float* first = base + static_cast<int64_t>(s.hidden_begin - r.first_position) * E;
      hidden.values.assign(first, first + static_cast<int64_t>(s.num_hidden) * E);
      result.hidden.push_back(std::move(hidden));
    }
    if (s.num_scored == 0) continue;
    PromptScores scores{s.seq_id, s.scored_begin, std::vector<ScoredToken>(static_cast<size_t>(s.num_scored))};
    for (int64_t done = 0; done < s.num_scored; done += chunk_rows) {
      const int64_t n = std::min<int64_t>(chunk_rows, s.num_scored - done);
      score_logits_.resize(static_cast<size_t>(n * V));
      const float* hidden = base + (s.scored_begin - r.first_position + done) * E;
      forward_.project_output(hidden, n, score_logits_.data(), pool_);
      pool_.parallel_for(n, [&](int64_t b, int64_t e, int t) {
        for (int64_t k = b; k < e; ++k) {
          const int32_t target = batch.score_targets[static_cast<size_t>(s.score_offset + done + k)];
          scores.tokens[static_cast<size_t>(done + k)] = samplers_[t].score(
              std::span<const float>(score_logits_.data() + k * V, static_cast<size_t>(V)), target,
              s.score_top_n);
        }
      });
    }
    result.scores.push_back(std::move(scores));
  }
}

StepResult CpuBackend::run_step(const StepBatch& batch) {
  std::lock_guard lock(compute_mutex_);
  return run_locked(batch).result;
}

void CpuBackend::launch(StepBatch batch, Completion done) {
  {
    std::lock_guard lock(queue_mutex_);
    queue_.push_back(Job{std::move(batch), std::move(done)});
  }
  queue_cv_.notify_one();
}

void CpuBackend::dispatcher_loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(queue_mutex_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every launched step has completed
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    StepOutcome outcome;
    try {
      std::lock_guard lock(compute_mutex_);
      outcome = run_locked(job.batch);
    } catch (const std::exception& e) {
      outcome.error = e.what();
      outcome.result.step_id = job.batch.step_id;
    }
    job.done(std::move(outcome));
  }
}

}  // namespace troupe::gpu::cpu
