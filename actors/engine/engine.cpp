// Engine wiring: loads the model, builds the backend, starts the actors on their threads and
// connects their mailboxes.
//
//   thread "ingress"  IngressActor      detokenize, stop strings, sinks
//   thread "prompt"   prompt building   chat template, tokenize, validate (for ingress)
//   thread "tokenize" /tokenize, /detokenize work posted by net
//   thread "engine"   SchedulerActor    the step loop around the policy
//                     KvCacheActor      home of the KV manager, lent to the scheduler per tick
//                     GpuWorkerActor    launches steps on the backend
//   backend threads   CpuBackend        compute (or a CUDA event poller)
#include "actors/engine/engine.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <future>
#include <random>
#include <thread>

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/disagg/compatibility.hpp"
#include "actors/disagg/peer_client.hpp"
#include "actors/engine/engine_config.hpp"
#include "actors/kv_cache/transfer/tcp_transport.hpp"
#include "actors/kv_cache/transfer/ucx_transport.hpp"
#include "actors/common/stats_board.hpp"
#include "actors/gpu_worker/gpu_worker_actor.hpp"
#include "actors/ingress/ingress_actor.hpp"
#include "actors/kv_cache/events/kv_event_publisher.hpp"
#include "actors/kv_cache/kv_cache_actor.hpp"
#include "actors/kv_cache/kv_capacity.hpp"
#include "actors/runtime/executor_threads.hpp"
#include "actors/scheduler/scheduler_actor.hpp"
#include "gpu/backend_factory.hpp"
#include "model/chat_template.hpp"
#include "model/gguf.hpp"
#include "model/grammar/grammar_compiler.hpp"
#include "model/tokenizer.hpp"

namespace troupe::engine {
namespace {

// Structured output (issue 19): one grammar compiler for the model's vocabulary, shared by the
// prompt workers, or the reason there is none. The bitmask covers the logits row, which may be
// wider than the tokenizer's vocabulary (padded embeddings): the extra ids are never allowed.
// Both backends apply the bitmask rows (gpu/cpu/token_mask, gpu/cuda/token_mask).
void set_up_structured_output(ingress::PromptBuilder& prompts, const model::Tokenizer& tokenizer,
                              const model::ModelInfo& info, const StructuredOutputOptions& options) {
#ifdef TROUPE_HAVE_XGRAMMAR
  const size_t logits_width = std::max<size_t>(tokenizer.vocab_size(), info.vocab_size);
  model::grammar::GrammarCompilerConfig config;
  config.cache_capacity = static_cast<size_t>(std::max(options.grammar_cache_size, 0));
  config.max_source_bytes = static_cast<size_t>(std::max<int64_t>(options.max_grammar_bytes, 0));
  config.threads_per_compile = std::max(options.compile_threads, 1);
  if (options.json_max_whitespace > 0) config.json_max_whitespace = options.json_max_whitespace;
  auto compiler = std::make_shared<model::grammar::GrammarCompiler>(
      model::grammar::TokenizerInfo::from_tokenizer(tokenizer, logits_width), config);
  prompts.set_structured_output(std::move(compiler), "");
#else
  (void)tokenizer;
  (void)info;
  (void)options;
  prompts.set_structured_output(nullptr, "structured output is not built into this server");
#endif
}

}  // namespace

namespace {

using actors::runtime::ExecutorThreads;
using actors::runtime::SendStatus;
using Clock = std::chrono::steady_clock;

RequestPhase phase_of(scheduler::SlotPhase phase) {
  switch (phase) {
    case scheduler::SlotPhase::kWaiting: return RequestPhase::kWaiting;
    case scheduler::SlotPhase::kPreempted: return RequestPhase::kPreempted;
    case scheduler::SlotPhase::kPrefill: return RequestPhase::kPrefill;
    case scheduler::SlotPhase::kDecode: return RequestPhase::kDecode;
    case scheduler::SlotPhase::kAwaitingTransfer: return RequestPhase::kPrefill;
  }
  return RequestPhase::kWaiting;
}

// The cost model's prior from the model's arithmetic (step_cost_model.hpp): relative weights
// only; the fit replaces the speed with this machine's within a few dozen steps.
scheduler::StepCostFitterConfig step_cost_fitter_config(const model::ModelInfo& info) {
  scheduler::StepCostFitterConfig config;
  const auto embd = static_cast<double>(info.embedding_length);
  const auto vocab = static_cast<double>(info.vocab_size);
  const double embedding = vocab * embd;
  config.arithmetic.flops_per_token =
      2.0 * std::max(static_cast<double>(info.num_parameters) - embedding, embedding);
  // QK and PV: 2 flops each per head dimension, over every head of every layer.
  config.arithmetic.flops_per_context = 4.0 * static_cast<double>(info.num_layers) * embd;
  config.arithmetic.flops_per_sampled = 2.0 * embedding;
  return config;
}

std::string random_engine_id() {
  std::random_device random;
  return fmt::format("troupe-{:08x}{:08x}", random(), random());
}

// Disaggregated prefill/decode: the transport over the backend's KV memory and the metadata
// peers shake hands with. Start-up failures throw (a misconfigured role must not serve).
struct KvMovement {
  std::unique_ptr<kv_transfer::KvTransport> transport;
  disagg::KvMetadata metadata;
};

KvMovement start_kv_movement(const EngineConfig& config, gpu::Backend& backend,
                             const model::GgufFile& file) {
  const std::optional<gpu::KvHostMemory> memory = backend.kv_host_memory();
  if (!memory) {
    throw std::runtime_error(fmt::format(
        "disagg.role '{}': the {} backend offers no host memory for its KV to move through",
        disagg::to_string(config.disagg.role), backend.name()));
  }
  KvMovement movement;
  std::string error;
  switch (config.disagg.kv_transport) {
    case disagg::KvTransportKind::kTcp: {
      kv_transfer::TcpTransportConfig tcp;
      tcp.listen_host = config.disagg.kv_listen_host;
      tcp.port = config.disagg.kv_port;
      tcp.advertise_host = config.disagg.advertise_host;
      movement.transport = kv_transfer::make_tcp_transport(
          memory->base, static_cast<size_t>(memory->bytes), tcp, &error);
      break;
    }
    case disagg::KvTransportKind::kUcx: {
      kv_transfer::UcxTransportConfig ucx;
      ucx.transports = config.kv_transport_tls;
      movement.transport = kv_transfer::make_ucx_transport(
          memory->base, static_cast<size_t>(memory->bytes), ucx, &error);
      break;
    }
  }
  if (!movement.transport) throw std::runtime_error("KV transport failed to start: " + error);
  disagg::KvMetadata& m = movement.metadata;
  m.engine_id = random_engine_id();
  m.descriptor = movement.transport->local_descriptor();
  m.layout.num_layers = memory->num_layers;
  m.layout.num_kv_heads = memory->num_kv_heads;
  m.layout.head_dim = memory->head_dim;
  m.layout.block_size = memory->block_size;
  m.layout.num_blocks = memory->num_blocks;
  m.layout.block_bytes = static_cast<uint64_t>(memory->block_bytes);
  // The handshake compares it (and the compatibility hash covers it): a q8_0 decode server never
  // pulls an f16 prefill server's bytes, it prefills locally and says why.
  m.layout.dtype = std::string(gpu::kKvDtypeNames.name(memory->dtype));
  m.layout.kv_stride = static_cast<uint64_t>(memory->kv_stride);
  m.layout.layer_stride = static_cast<uint64_t>(memory->layer_stride);
  m.compatibility_hash = disagg::kv_compatibility_hash(file, m.layout);
  spdlog::info("disagg: role {}, engine id {}, KV over {} {} ({} blocks, {:.1f} MiB registered)",
               disagg::to_string(config.disagg.role), m.engine_id, movement.transport->name(),
               movement.transport->name() == "tcp" ? m.descriptor.worker_address : std::string(),
               m.layout.num_blocks, static_cast<double>(m.descriptor.region_bytes) / (1 << 20));
  return movement;
}

class EngineImpl final : public Engine {
 public:
  EngineImpl(const EngineConfig& config, std::shared_ptr<disagg::PeerClient> peers);
  ~EngineImpl() override;

  RequestId submit(GenerateRequest request, std::shared_ptr<RequestSink> sink) override;
  std::optional<RequestError> refuse_prompt_outputs(const GenerateRequest& request) const;
  void cancel(RequestId request_id) override;
  EngineStats stats() const override;
  std::vector<RequestInfo> requests() const override;
  bool drain(std::chrono::milliseconds deadline) override;
  int64_t flush_prefix_cache() override;
  const model::Tokenizer& tokenizer() const override { return *tokenizer_; }
  void post_tokenizer_work(std::function<void()> work) override {
    boost::asio::post(tokenize_thread_->executor(), std::move(work));
  }
  const ModelCard& model_card() const override { return card_; }
  std::optional<disagg::KvMetadata> kv_metadata() const override { return kv_metadata_; }
  bool release_kv_lease(std::string_view remote_request_id) override;

 private:
  // Resolving the configuration: the policy completed from the model and the backend it gets
  // (context length, end ids, what the backend cannot do, its KV geometry).
  std::pair<scheduler::SchedulerConfig, std::unique_ptr<gpu::Backend>> resolve_policy_and_backend(
      const EngineConfig& config);
  // Wiring: the four actors, connected (not started).
  void create_actors(const EngineConfig& config, const scheduler::SchedulerConfig& policy,
                     std::unique_ptr<gpu::Backend> backend, model::ChatTemplate chat_template);
  void connect_kv_transfer(const EngineConfig& config,
                           std::unique_ptr<kv_transfer::KvTransport> transport,
                           std::shared_ptr<disagg::PeerClient> peers);
  void start_threads();
  void shutdown(std::chrono::milliseconds deadline);

  ModelCard card_;
  std::shared_ptr<const model::GgufFile> file_;
  std::optional<model::Tokenizer> tokenizer_;
  std::shared_ptr<StatsBoard> board_ = std::make_shared<StatsBoard>();
  std::atomic<RequestId> next_request_id_{1};
  std::atomic<bool> draining_{false};
  Clock::time_point started_at_ = Clock::now();

  std::unique_ptr<ExecutorThreads> engine_thread_;
  std::unique_ptr<ExecutorThreads> ingress_thread_;
  std::unique_ptr<ExecutorThreads> prompt_thread_;
  std::unique_ptr<ExecutorThreads> tokenize_thread_;
  std::shared_ptr<gpu_worker::GpuWorkerActor> gpu_worker_;
  std::shared_ptr<kv_cache::KvCacheActor> kv_cache_;
  std::shared_ptr<scheduler::SchedulerActor> scheduler_;
  std::shared_ptr<ingress::IngressActor> ingress_;
  std::optional<disagg::KvMetadata> kv_metadata_;  // set when this server moves KV
  bool shut_down_ = false;
};

EngineImpl::EngineImpl(const EngineConfig& config, std::shared_ptr<disagg::PeerClient> peers) {
  file_ = std::make_shared<const model::GgufFile>(model::GgufFile::open(config.model_path));
  card_.info = model::read_model_info(*file_, config.model_id);
  tokenizer_.emplace(model::Tokenizer::from_gguf(*file_));
  model::ChatTemplate chat_template = model::ChatTemplate::for_model(*file_, config.chat_template);
  card_.tool_call_format = chat_template.tool_call_format();
  // Which format chats get, and why: configured, detected from the file's template, or the
  // architecture's own when the file has none (a gemma3 conversion often has none).
  spdlog::info("chat template: {} ({})", chat_template.name(),
               !config.chat_template.empty() ? "configured"
               : file_->get_string("tokenizer.chat_template") ? "detected from the GGUF's template"
                                                               : "the GGUF has none: the architecture's default");

  auto [policy, backend] = resolve_policy_and_backend(config);
  KvMovement movement;
  if (config.disagg.role != disagg::Role::kCombined) {
    movement = start_kv_movement(config, *backend, *file_);
    kv_metadata_ = movement.metadata;
  }
  create_actors(config, policy, std::move(backend), std::move(chat_template));
  if (kv_metadata_) connect_kv_transfer(config, std::move(movement.transport), peers);
  const std::string engine_id = kv_metadata_ ? kv_metadata_->engine_id : std::string();
  ingress_->set_disagg({config.disagg, engine_id, kv_metadata_.has_value(), peers});
  start_threads();
}

std::pair<scheduler::SchedulerConfig, std::unique_ptr<gpu::Backend>>
EngineImpl::resolve_policy_and_backend(const EngineConfig& config) {
  scheduler::SchedulerConfig policy = config.scheduler;
  if (policy.max_model_len <= 0) policy.max_model_len = static_cast<int32_t>(card_.info.context_length);
  if (policy.eos_token_ids.empty()) policy.eos_token_ids = tokenizer_->end_of_generation_ids();

  gpu::BuiltBackend built = gpu::make_backend(file_, backend_options_of(config, policy));
  spdlog::info("{}", built.note);
  card_.backend = std::string(built.backend->name());
  card_.prompt_outputs = built.backend->supports_prompt_outputs();
  if (policy.speculative.enabled() && !built.backend->supports_speculation()) {
    // The CUDA backend samples one position per sequence; verify spans are not built there.
    // Info, not a warning: speculation is on by default, and this is the default's answer here.
    spdlog::info("speculative decoding ({}) needs a backend that verifies draft spans; the {} "
                 "backend does not: decoding without drafts",
                 scheduler::to_string(policy.speculative.method), built.backend->name());
    policy.speculative = {};
  }
  // CUDA steps are queued on the device whole (and short): nothing to give up.
  if (!built.backend->supports_interrupts()) policy.first_token_interrupts = false;
  const gpu::KvCacheGeometry geometry = built.backend->kv_geometry();
  policy.num_blocks = geometry.num_blocks;
  policy.block_size = geometry.block_size;
  policy.num_kv_groups = geometry.num_kv_groups;
  policy.sliding_window = geometry.sliding_window;
  card_.kv = kv_cache::kv_capacity(geometry, policy.max_model_len);
  spdlog::info("KV cache: {} blocks of {} tokens, {} tokens ({}, {:.1f} MiB): about {} "
               "conversations of {} tokens (max_model_len) at once",
               card_.kv.blocks, card_.kv.block_size, card_.kv.tokens, card_.kv.dtype,
               static_cast<double>(card_.kv.bytes) / (1 << 20), card_.kv.conversations,
               card_.kv.conversation_tokens);
  if (geometry.num_kv_groups > 1 && config.kv_events.enabled) {
    throw std::runtime_error(
        "kv_events.enabled: this model's sliding-window KV groups cache pages that a router's "
        "block hashes cannot describe (a hit needs each group's window too); KV events are not "
        "published for such models");
  }
  if (geometry.num_kv_groups > 1) {
    spdlog::info("KV groups: {} of {} layers each; groups 1-{} (sliding-window layers) keep the "
                 "last {} tokens, so a sequence holds its whole context in group 0 only; the "
                 "prefix cache keeps their pages beside group 0's",
                 geometry.num_kv_groups, geometry.layers_per_group, geometry.num_kv_groups - 1,
                 geometry.sliding_window);
  }
  return {std::move(policy), std::move(built.backend)};
}

void EngineImpl::create_actors(const EngineConfig& config, const scheduler::SchedulerConfig& policy,
                               std::unique_ptr<gpu::Backend> backend,
                               model::ChatTemplate chat_template) {
  const auto capacity = static_cast<size_t>(config.mailbox_capacity);
  gpu_worker_ = std::make_shared<gpu_worker::GpuWorkerActor>(std::move(backend));
  kv_cache::KvCacheConfig kv_config = scheduler::Scheduler::kv_cache_config(policy);
  kv_config.emit_events = config.kv_events.enabled;
  kv_config.event_hash_seed = config.kv_events.hash_seed;
  kv_cache_ = std::make_shared<kv_cache::KvCacheActor>(kv_config, board_, capacity);
  if (config.kv_events.enabled) {
    // "GPU" is vLLM's name for device memory; on the CPU backend the blocks live in host memory.
    const std::string medium = card_.backend == "cuda" ? "GPU" : "CPU";
    kv_cache_->set_event_sink(std::make_shared<kv_cache::KvEventPublisher>(config.kv_events, medium));
    spdlog::info("KV events: {} {} (topic '{}', replay {}, hash seed '{}', {} format)",
                 kv_cache::kv_event_endpoint_binds(config.kv_events.endpoint) ? "bound to" : "connected to",
                 config.kv_events.endpoint, config.kv_events.topic,
                 config.kv_events.replay_endpoint.empty() ? "off" : config.kv_events.replay_endpoint,
                 config.kv_events.hash_seed, kv_cache::to_string(config.kv_events.format));
  }
  scheduler_ = std::make_shared<scheduler::SchedulerActor>(
      policy, step_cost_fitter_config(card_.info), board_, capacity);
  // One thread each: a long prompt delays other prompts' building, never a running stream's
  // text (ingress) nor a step (engine); more would take cores from the compute threads.
  prompt_thread_ = std::make_unique<ExecutorThreads>("prompt", 1);
  tokenize_thread_ = std::make_unique<ExecutorThreads>("tokenize", 1);
  ingress::PromptLimits limits{policy.max_model_len, config.default_max_tokens,
                               config.max_stop_strings};
  ingress::PromptBuilder prompts(*tokenizer_, std::move(chat_template), limits);
  set_up_structured_output(prompts, *tokenizer_, card_.info, config.structured_output);
  ingress_ = std::make_shared<ingress::IngressActor>(
      std::move(prompts), prompt_thread_->executor(), board_, config.stats_window, capacity);
  scheduler_->connect(ingress_, kv_cache_, gpu_worker_);
  ingress_->connect(scheduler_);
}

// The KV transfer agent's messages reach the actors through weak references: it lives inside
// the kv-cache actor and must not keep the others alive.
void EngineImpl::connect_kv_transfer(const EngineConfig& config,
                                     std::unique_ptr<kv_transfer::KvTransport> transport,
                                     std::shared_ptr<disagg::PeerClient> peers) {
  std::weak_ptr<kv_cache::KvCacheActor> kv_weak = kv_cache_;
  std::weak_ptr<scheduler::SchedulerActor> scheduler_weak = scheduler_;
  std::weak_ptr<ingress::IngressActor> ingress_weak = ingress_;
  kv_cache::KvTransferAgent::Outbox outbox{
      [kv_weak](kv_cache::KvCacheMessage m) {
        if (auto kv = kv_weak.lock()) kv->deliver(std::move(m));
      },
      [scheduler_weak](scheduler::SchedulerMessage m) {
        actors::runtime::deliver(scheduler_weak.lock(), std::move(m));
      },
      [ingress_weak](disagg::PeerUnusable m) {
        actors::runtime::deliver(ingress_weak.lock(), ingress::IngressMessage{std::move(m)});
      }};
  kv_cache_->set_transfer_agent(std::make_unique<kv_cache::KvTransferAgent>(
      config.disagg, *kv_metadata_, std::move(transport), std::move(peers), std::move(outbox)));
}

void EngineImpl::start_threads() {
  engine_thread_ = std::make_unique<ExecutorThreads>("engine", 1);
  ingress_thread_ = std::make_unique<ExecutorThreads>("ingress", 1);
  gpu_worker_->start(engine_thread_->executor());
  kv_cache_->start(engine_thread_->executor());
  if (kv_metadata_) kv_cache_->start_lease_clock(std::chrono::milliseconds(250));
  scheduler_->start(engine_thread_->executor());
  ingress_->start(ingress_thread_->executor());
}

EngineImpl::~EngineImpl() { shutdown(std::chrono::milliseconds(5000)); }

RequestId EngineImpl::submit(GenerateRequest request, std::shared_ptr<RequestSink> sink) {
  // A request of n choices is n sequences: ids id .. id + n - 1 are reserved for them, so that
  // every sequence the scheduler sees has an id of its own and choice i is id + i.
  // An embeddings request is one sequence per input, likewise.
  const size_t num_sequences = request.embedding ? request.embedding->inputs.size()
                                                 : static_cast<size_t>(std::max<int32_t>(request.n, 1));
  const auto num_ids = static_cast<RequestId>(std::max<size_t>(num_sequences, 1));
  const RequestId id = next_request_id_.fetch_add(num_ids, std::memory_order_relaxed);
  if (draining_.load(std::memory_order_acquire)) {
    sink->on_error(id, RequestError{ErrorCode::kDraining, "the server is draining", ""});
    return id;
  }
  if (auto refusal = refuse_prompt_outputs(request)) {
    sink->on_error(id, std::move(*refusal));
    return id;
  }
  ingress::IngressMessage message{ingress::Submit{id, std::move(request), sink, Clock::now()}};
  const SendStatus status = ingress_->try_send(std::move(message));
  if (status != SendStatus::kAccepted) {
    // Refused before ingress saw it, so this is the only call the sink gets.
    sink->on_error(id, status == SendStatus::kFull
                           ? RequestError{ErrorCode::kQueueFull, "the server is overloaded; retry later", ""}
                           : RequestError{ErrorCode::kDraining, "the server is shutting down", ""});
  }
  return id;
}

// Embeddings and prompt logprobs need a backend that returns prompt outputs; on one that does
// not, the request is refused naming it (never answered without them).
std::optional<RequestError> EngineImpl::refuse_prompt_outputs(const GenerateRequest& request) const {
  if (card_.prompt_outputs) return std::nullopt;
  const char* what = request.embedding              ? "embeddings are"
                     : request.prompt_logprobs >= 0 ? "prompt logprobs are"
                     : request.prompt_only          ? "scoring a prompt (max_tokens 0) is"
                                                    : nullptr;
  if (what == nullptr) return std::nullopt;
  return RequestError{ErrorCode::kInvalidRequest,
                      fmt::format("{} not supported by the {} backend", what, card_.backend),
                      request.embedding ? "input" : request.prompt_logprobs >= 0 ? "prompt_logprobs" : "max_tokens"};
}

// A cancel must not be lost when the mailbox is momentarily full (deliver waits for room).
void EngineImpl::cancel(RequestId request_id) {
  actors::runtime::deliver(ingress_, ingress::IngressMessage{ingress::CancelRequest{request_id}});
}

bool EngineImpl::release_kv_lease(std::string_view remote_request_id) {
  RequestId id = 0;
  const auto [end, error] =
      std::from_chars(remote_request_id.data(), remote_request_id.data() + remote_request_id.size(), id);
  if (error != std::errc() || end != remote_request_id.data() + remote_request_id.size()) return false;
  auto reply = std::make_shared<std::promise<bool>>();
  std::future<bool> released = reply->get_future();
  kv_cache::KvCacheMessage message{kv_cache::ReleaseKvLease{id, reply}};
  if (kv_cache_->try_send(std::move(message)) != SendStatus::kAccepted) return false;
  if (released.wait_for(std::chrono::seconds(10)) != std::future_status::ready) return false;
  try {
    return released.get();
  } catch (const std::future_error&) {
    return false;
  }
}

int64_t EngineImpl::flush_prefix_cache() {
  auto reply = std::make_shared<std::promise<int64_t>>();
  std::future<int64_t> flushed = reply->get_future();
  kv_cache::KvCacheMessage message{kv_cache::FlushPrefixCache{reply}};
  if (kv_cache_->try_send(std::move(message)) != SendStatus::kAccepted) return 0;
  // Answered between two ticks (the scheduler holds the manager for one tick, a step takes
  // milliseconds to a few seconds).
  if (flushed.wait_for(std::chrono::seconds(30)) != std::future_status::ready) return 0;
  try {
    return flushed.get();
  } catch (const std::future_error&) {
    return 0;  // the kv-cache actor shut down before answering
  }
}

EngineStats EngineImpl::stats() const {
  const auto sched = board_->load_scheduler();
  const auto front = board_->load_ingress();
  const auto kv_home = board_->load_kv_cache();
  const scheduler::SchedulerStats& s = sched->stats;
  const kv_cache::KvCacheStats& kv = kv_home->stats;  // the kv-cache actor's, as of its last tick
  EngineStats out;
  out.num_waiting = s.num_waiting;
  out.num_running = s.num_running;
  out.num_preempted = s.num_preempted_waiting;
  out.kv_blocks_total = kv.num_blocks;
  out.kv_blocks_used = kv.num_referenced;
  out.kv_blocks_cached = kv.num_cached_unreferenced;
  out.kv_blocks_free = kv.num_free;
  out.kv_block_size = kv.block_size;
  out.kv_cache_dtype = card_.kv.dtype;
  out.prefix_caching = kv.prefix_caching;
  out.kv_events_published = kv_home->events.published_events;
  out.kv_events_dropped = kv_home->events.dropped_events;
  out.kv_usage_ratio = kv.usage_ratio;
  out.prefix_cache_queries = kv.prefix.num_queries;
  out.prefix_cache_hits = kv.prefix.num_hits;
  out.prefix_cache_hit_rate = kv.prefix.hit_rate();
  out.num_preemptions = s.num_preemptions;
  out.num_fairness_preemptions = s.num_fairness_preemptions;
  out.num_waiting_clients = s.num_waiting_clients;
  out.num_prefix_deferrals = s.num_prefix_deferrals;
  out.num_requests_finished = s.num_requests_finished;
  out.num_requests_refused = s.num_requests_refused + front->num_refused;
  out.prompt_tokens_total = s.num_prompt_tokens;
  out.generation_tokens_total = s.num_generated_tokens;
  out.num_steps = s.num_steps;
  out.speculative.num_drafts = s.num_spec_drafts;
  out.speculative.num_draft_tokens = s.num_spec_draft_tokens;
  out.speculative.num_accepted_tokens = s.num_spec_accepted_tokens;
  out.tokens_per_s_10s = front->tokens_per_s;
  out.step_time = sched->step_time;
  out.step_cost = sched->step_cost;
  out.step_account = sched->step_account;
  out.structured_output = sched->structured_output;
  if (sched->total_tick_ms > 0) {
    out.engine_overhead_ratio = 1.0 - sched->total_device_ms / sched->total_tick_ms;
  }
  out.time_to_first_token = front->time_to_first_token;
  out.uptime_s = std::chrono::duration<double>(Clock::now() - started_at_).count();
  out.draining = draining_.load(std::memory_order_acquire);
  out.kv_transfer = kv_home->transfer;
  out.kv_transfer.num_remote_prefills = front->num_remote_prefills;
  out.kv_transfer.num_remote_prefill_fallbacks = front->num_remote_prefill_fallbacks;
  out.kv_transfer.num_kv_pull_fallbacks = s.num_kv_pull_fallbacks;
  out.kv_transfer.num_awaiting_kv = s.num_awaiting_kv;
  return out;
}

std::vector<RequestInfo> EngineImpl::requests() const {
  const auto sched = board_->load_scheduler();
  const auto front = board_->load_ingress();
  std::unordered_map<RequestId, const scheduler::SlotInfo*> slots;
  for (const scheduler::SlotInfo& slot : sched->slots) slots.emplace(slot.request_id, &slot);
  const Clock::time_point now = Clock::now();
  std::vector<RequestInfo> out;
  out.reserve(front->live.size());
  for (const LiveRequestSummary& live : front->live) {
    RequestInfo info;
    info.request_id = live.request_id;
    info.client_label = live.client_label;
    info.client = live.client;
    info.origin = live.origin;
    info.age_ms = std::chrono::duration<double, std::milli>(now - live.submitted_at).count();
    if (auto it = slots.find(live.request_id); it != slots.end()) {
      info.phase = phase_of(it->second->phase);
      info.priority = it->second->priority;
      info.prompt_tokens = it->second->num_prompt_tokens;
      info.generated_tokens = it->second->num_generated_tokens;
    } else {
      info.phase = RequestPhase::kFinishing;
    }
    out.push_back(std::move(info));
  }
  return out;
}

bool EngineImpl::drain(std::chrono::milliseconds deadline) {
  draining_.store(true, std::memory_order_release);
  const Clock::time_point until = Clock::now() + deadline;
  while (Clock::now() < until) {
    if (board_->load_ingress()->live.empty() && board_->load_scheduler()->stats.num_running == 0 &&
        board_->load_scheduler()->stats.num_waiting == 0) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ingress::IngressMessage cancel_all{ingress::CancelAll{}};
  (void)ingress_->try_send(std::move(cancel_all));
  return false;
}

void EngineImpl::shutdown(std::chrono::milliseconds deadline) {
  if (shut_down_) return;
  shut_down_ = true;
  draining_.store(true, std::memory_order_release);
  // Live requests are cancelled (each sink gets its final call), then the actors stop in
  // dependency order: ingress admits nothing new, the scheduler drains, the worker last.
  ingress::IngressMessage cancel_all{ingress::CancelAll{}};
  (void)ingress_->try_send(std::move(cancel_all));
  const Clock::time_point until = Clock::now() + deadline;
  while (Clock::now() < until && !board_->load_ingress()->live.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // The kv-cache actor outlives the scheduler, which needs the KV manager to the end.
  const auto ingress_outcome = ingress_->shutdown(until);
  const auto scheduler_outcome = scheduler_->shutdown(until);
  const auto kv_outcome = kv_cache_->shutdown(until);
  const auto worker_outcome = gpu_worker_->shutdown(until);
  using actors::runtime::ShutdownOutcome;
  if (scheduler_outcome != ShutdownOutcome::kDrained || ingress_outcome != ShutdownOutcome::kDrained ||
      kv_outcome != ShutdownOutcome::kDrained || worker_outcome != ShutdownOutcome::kDrained) {
    spdlog::warn("engine shutdown: ingress {}, scheduler {}, kv-cache {}, gpu-worker {}",
                 actors::runtime::to_string(ingress_outcome),
                 actors::runtime::to_string(scheduler_outcome), actors::runtime::to_string(kv_outcome),
                 actors::runtime::to_string(worker_outcome));
  }
  scheduler_->disconnect();
  ingress_->disconnect();
  ingress_thread_->join(Clock::now() + std::chrono::seconds(2));
  engine_thread_->join(Clock::now() + std::chrono::seconds(2));
  // A job still running finishes alone: it holds the prompt builder and only a weak reference
  // to ingress. What the join forces away is a queued job whose request ingress already ended.
  prompt_thread_->join(Clock::now() + std::chrono::seconds(2));
  tokenize_thread_->join(Clock::now() + std::chrono::seconds(2));
}

}  // namespace

// What the backend is built with: the engine's backend settings, and the sizes it must cover,
// derived from the scheduling policy here and nowhere else (the policy never plans a step past
// max_num_batched_tokens tokens or max_num_seqs sampling rows; KV blocks are the policy's).
gpu::BackendOptions backend_options_of(const EngineConfig& config,
                                       const scheduler::SchedulerConfig& policy) {
  gpu::BackendOptions o;
  o.request = config.backend;
  o.cpu_threads = config.cpu.num_threads;
  o.cpu_prefill_attention = config.cpu.prefill_attention;
  o.kv_memory_bytes = config.cpu.kv_memory_bytes;
  o.gpu_memory_utilization = config.cuda.gpu_memory_utilization;
  o.num_blocks = policy.num_blocks;
  o.block_size = policy.block_size;
  o.kv_dtype = config.cache.kv_dtype;
  o.max_num_batched_tokens = policy.max_num_batched_tokens;
  o.max_num_seqs = policy.max_num_seqs;
  o.kv_host_mirror = config.disagg.role != disagg::Role::kCombined;
  return o;
}

std::unique_ptr<Engine> Engine::start(const EngineConfig& config,
                                      std::shared_ptr<disagg::PeerClient> peers) {
  return std::make_unique<EngineImpl>(config, std::move(peers));
}

}  // namespace troupe::engine
