#include "net/metrics.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include <fmt/format.h>

namespace troupe::net {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(upper_bounds_.size() + 1)) {
  std::sort(upper_bounds_.begin(), upper_bounds_.end());
}

void Histogram::observe(double value) {
  const size_t bucket =
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  double sum = sum_.load(std::memory_order_relaxed);
  while (!sum_.compare_exchange_weak(sum, sum + value, std::memory_order_relaxed)) {
  }
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.upper_bounds = upper_bounds_;
  uint64_t running = 0;
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    s.cumulative_counts.push_back(running);
  }
  // NOTE: count is read as the sum of buckets so the +Inf bucket is never below the others.
  s.count = running + counts_[upper_bounds_.size()].load(std::memory_order_relaxed);
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

namespace {
// vLLM's buckets for the same quantities (seconds).
std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
          7.5,   10.0,  20.0, 40.0, 80.0, 160.0};
}
std::vector<double> itl_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0};
}
std::vector<double> request_buckets() {
  return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
          120.0, 240.0, 480.0};
}

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);
}

std::string escape_label(std::string_view value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}
}  // namespace

ServingMetrics::ServingMetrics()
    : time_to_first_token_s(ttft_buckets()),
      inter_token_latency_s(itl_buckets()),
      e2e_latency_s(request_buckets()),
      queue_time_s(request_buckets()) {}

void ServingMetrics::observe_latencies(const engine::Completion& completion) {
  const engine::Timings& t = completion.timings;
  if (completion.usage.completion_tokens > 0) {
    time_to_first_token_s.observe(t.time_to_first_token_ms / 1000.0);
  }
  e2e_latency_s.observe(t.total_ms / 1000.0);
  queue_time_s.observe(t.queue_ms / 1000.0);
}

void ServingMetrics::count_finished(std::string_view finish_reason) {
  if (finish_reason == "stop") {
    finished_stop.fetch_add(1, std::memory_order_relaxed);
  } else if (finish_reason == "length") {
    finished_length.fetch_add(1, std::memory_order_relaxed);
  } else {
    finished_cancelled.fetch_add(1, std::memory_order_relaxed);
  }
}


void PrometheusText::header(std::string_view name, std::string_view help, std::string_view type) {
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void PrometheusText::sample(std::string_view name, const Labels& extra, double value) {
  out_ += name;
  if (!common_.empty() || !extra.empty()) {
    out_ += '{';
    bool first = true;
    for (const Labels* labels : {static_cast<const Labels*>(&common_), &extra}) {
      for (const auto& [key, label_value] : *labels) {
        if (!first) out_ += ',';
        first = false;
        out_ += fmt::format("{}=\"{}\"", key, escape_label(label_value));
      }
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += format_value(value);
  out_ += '\n';
}

void PrometheusText::gauge(std::string_view name, std::string_view help, double value) {
  header(name, help, "gauge");
  sample(name, {}, value);
}

void PrometheusText::gauge(std::string_view name, std::string_view help,
                           const std::vector<std::pair<Labels, double>>& samples) {
  header(name, help, "gauge");
  for (const auto& [labels, value] : samples) sample(name, labels, value);
}

void PrometheusText::counter(std::string_view name, std::string_view help, double value) {
  header(name, help, "counter");
  sample(name, {}, value);
}

void PrometheusText::counter(std::string_view name, std::string_view help,
                             const std::vector<std::pair<Labels, double>>& samples) {
  header(name, help, "counter");
  for (const auto& [labels, value] : samples) sample(name, labels, value);
}

void PrometheusText::histogram(std::string_view name, std::string_view help,
                               const Histogram::Snapshot& h) {
  header(name, help, "histogram");
  const std::string bucket = fmt::format("{}_bucket", name);
  for (size_t i = 0; i < h.upper_bounds.size(); ++i) {
    sample(bucket, {{"le", format_value(h.upper_bounds[i])}},
           static_cast<double>(h.cumulative_counts[i]));
  }
  sample(bucket, {{"le", "+Inf"}}, static_cast<double>(h.count));
  sample(fmt::format("{}_sum", name), {}, h.sum);
  sample(fmt::format("{}_count", name), {}, static_cast<double>(h.count));
}

void PrometheusText::summary(std::string_view name, std::string_view help,
                             const std::vector<std::pair<double, double>>& quantile_values) {
  header(name, help, "summary");
  for (const auto& [quantile, value] : quantile_values) {
    sample(name, {{"quantile", format_value(quantile)}}, value);
  }
}

namespace {

// Disaggregated prefill/decode: KV moved between servers, its leases and its fallbacks.
void render_kv_transfer(PrometheusText& p, const engine::KvTransferStats& t) {
  p.gauge("troupe:kv_transfer_info", "This server's part in disaggregated prefill/decode.",
          {{{{"role", t.role}, {"engine_id", t.engine_id}, {"transport", t.transport}}, 1.0}});
  p.gauge("troupe:kv_transfer_leases", "Finished prefills whose KV is held for a decode server.",
          t.num_leases);
  p.counter("troupe:kv_transfer_leases_expired_total", "Leases that expired unpulled.",
            double(t.num_leases_expired));
  p.counter("troupe:kv_transfer_leases_released_total", "Leases a decode server released.",
            double(t.num_leases_released));
  p.gauge("troupe:kv_transfers_in_flight", "KV pulls running.", t.num_pulls_in_flight);
  p.gauge("troupe:kv_transfer_requests_awaiting_kv", "Requests whose KV is being pulled.",
          t.num_awaiting_kv);
  p.counter("troupe:kv_transfers_total", "KV pulls, by outcome.",
            {{{{"outcome", "ok"}}, double(t.num_pulls_ok)},
             {{{"outcome", "failed"}}, double(t.num_pulls_failed)}});
  p.counter("troupe:kv_transfer_blocks_total", "KV blocks pulled.", double(t.num_blocks_pulled));
  p.counter("troupe:kv_transfer_bytes_total", "KV bytes pulled.", double(t.bytes_pulled));
  p.gauge("troupe:kv_transfer_throughput_gbps", "Bytes pulled over time spent pulling, GB/s.",
          t.pull_seconds_total > 0 ? double(t.bytes_pulled) / t.pull_seconds_total / 1e9 : 0.0);
  Histogram::Snapshot h;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < engine::kPullMsBuckets.size(); ++i) {
    cumulative += t.pull_ms_buckets[i];
    h.upper_bounds.push_back(engine::kPullMsBuckets[i] / 1000.0);
    h.cumulative_counts.push_back(cumulative);
  }
  h.count = cumulative + t.pull_ms_buckets.back();
  h.sum = t.pull_seconds_total;
  p.histogram("troupe:kv_transfer_seconds", "Time of a successful KV pull.", h);
  p.counter("troupe:kv_transfer_handshake_failures_total",
            "Prefill servers whose metadata could not be fetched or did not match.",
            double(t.num_handshake_failures));
  p.counter("troupe:remote_prefills_total", "Prompts this decode server sent to prefill servers.",
            double(t.num_remote_prefills));
  p.counter("troupe:kv_transfer_fallbacks_total",
            "Requests whose remote prefill or KV pull failed and that were prefilled here.",
            double(t.num_remote_prefill_fallbacks + t.num_kv_pull_fallbacks));
}

// What a router scores pods by (issue 20): the Gateway API Inference Extension's model-server
// protocol (docs/proposals/003-model-server-protocol: queue depth, running requests, KV
// utilization, the LoRA state and the cache config) under vLLM's names, which its endpoint
// picker and llm-d scrape; plus the KV-event publisher's own counters.
void render_router_metrics(PrometheusText& p, const engine::EngineStats& s) {
  p.gauge("vllm:num_requests_running", "Requests in a running batch (vLLM name).", s.num_running);
  p.gauge("vllm:num_requests_waiting", "Requests waiting (vLLM name).", s.num_waiting);
  p.gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 1 = full (vLLM name).", s.kv_usage_ratio);
  p.gauge("vllm:gpu_cache_usage_perc", "KV-cache usage, 1 = full (older vLLM name).",
          s.kv_usage_ratio);
  // vLLM sets this gauge to the time of its last update so a picker can take the newest series;
  // a picker treats a pod without it as unable to serve adapters. troupe serves none: max_lora
  // 0 and both lists empty.
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  p.gauge("vllm:lora_requests_info", "Running stats on LoRA requests (vLLM name).",
          {{{{"max_lora", "0"}, {"running_lora_adapters", ""}, {"waiting_lora_adapters", ""}}, now}});
  // vLLM's info gauge: value 1, the cache config in labels (the picker reads block_size and
  // num_gpu_blocks; the rest say how blocks are hashed: kv_events.hash_seed is not shown).
  p.gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig (vLLM name).",
          {{{{"block_size", std::to_string(s.kv_block_size)},
             {"num_gpu_blocks", std::to_string(s.kv_blocks_total)},
             {"enable_prefix_caching", s.prefix_caching ? "True" : "False"},
             {"prefix_caching_hash_algo", "sha256_cbor"}},
            1.0}});
  p.counter("troupe:kv_events_published_total", "KV-cache events sent to routers.",
            double(s.kv_events_published));
  p.counter("troupe:kv_events_dropped_total",
            "KV-cache events dropped because the publisher's queue was full.",
            double(s.kv_events_dropped));
}

}  // namespace

std::string render_metrics(const engine::EngineStats& s, const ServingMetrics& serving,
                           std::string_view model_name, const ConnectionMetrics* connections) {
  PrometheusText p(PrometheusText::Labels{{"model_name", std::string(model_name)}});
  p.gauge("troupe:num_requests_running", "Requests in a running batch.", s.num_running);
  p.gauge("troupe:num_requests_waiting", "Requests waiting to be scheduled.", s.num_waiting);
  p.gauge("troupe:num_requests_preempted", "Requests preempted, waiting to resume.",
          s.num_preempted);
  p.gauge("troupe:kv_cache_usage_perc", "KV-cache usage (1 = full).", s.kv_usage_ratio);
  p.gauge("troupe:kv_blocks_total", "KV-cache blocks in the pool.", double(s.kv_blocks_total));
  p.gauge("troupe:kv_blocks_used", "KV-cache blocks referenced by a sequence.",
          double(s.kv_blocks_used));
  p.gauge("troupe:kv_blocks_cached", "Unreferenced cached prefix blocks.",
          double(s.kv_blocks_cached));
  p.gauge("troupe:kv_blocks_free", "Free KV-cache blocks.", double(s.kv_blocks_free));
  p.gauge("troupe:prefix_cache_hit_rate", "Prefix-cache hit rate.", s.prefix_cache_hit_rate);
  p.gauge("troupe:draining", "1 while the server drains.", s.draining ? 1 : 0);
  p.gauge("troupe:uptime_seconds", "Seconds since the engine started.", s.uptime_s);
  p.gauge("troupe:generation_tokens_per_second", "Generated tokens per second over 10 s.",
          s.tokens_per_s_10s);
  p.counter("troupe:prefix_cache_queries_total", "Prefix-cache queries.",
            double(s.prefix_cache_queries));
  p.counter("troupe:prefix_cache_hits_total", "Prefix-cache hits.", double(s.prefix_cache_hits));
  p.counter("troupe:num_preemptions_total", "Preemptions.", double(s.num_preemptions));
  p.counter("troupe:prefix_deferrals_total",
            "Admissions postponed while a running prefill computes a shared prompt block.",
            double(s.num_prefix_deferrals));
  p.counter("troupe:prompt_tokens_total", "Prompt tokens processed.",
            double(s.prompt_tokens_total));
  p.counter("troupe:generation_tokens_total", "Tokens generated.",
            double(s.generation_tokens_total));
  p.counter("troupe:num_steps_total", "Engine steps.", double(s.num_steps));
  p.counter("troupe:requests_refused_total", "Requests refused (queue full, draining).",
            double(s.num_requests_refused));
  p.counter("troupe:request_success_total",
            "Requests finished (HTTP, WebSocket, batch items), by finish reason.",
            {{{{"finished_reason", "stop"}}, double(serving.finished_stop.load())},
             {{{"finished_reason", "length"}}, double(serving.finished_length.load())},
             {{{"finished_reason", "cancelled"}}, double(serving.finished_cancelled.load())}});
  p.counter("troupe:request_failure_total",
            "Requests that ended in an error or were refused (HTTP, WebSocket, batch items).",
            double(serving.failed.load()));
  p.histogram("troupe:time_to_first_token_seconds", "Time to first token.",
              serving.time_to_first_token_s.snapshot());
  p.histogram("troupe:inter_token_latency_seconds", "Time between streamed tokens.",
              serving.inter_token_latency_s.snapshot());
  p.histogram("troupe:e2e_request_latency_seconds", "Submit to finish.",
              serving.e2e_latency_s.snapshot());
  p.histogram("troupe:request_queue_time_seconds", "Submit to first scheduled.",
              serving.queue_time_s.snapshot());
  // The engine publishes step-time quantiles only, hence a summary rather than a histogram.
  p.summary("troupe:step_time_seconds", "Engine step time.",
            {{0.5, s.step_time.p50_ms / 1000.0}, {0.99, s.step_time.p99_ms / 1000.0}});
  const engine::StepCostStats& cost = s.step_cost;
  p.gauge("troupe:step_budget_seconds", "Step-time budget while streams decode (0: off).",
          cost.max_step_ms / 1000.0);
  p.gauge("troupe:step_time_predicted_seconds", "The last step's time as the cost model predicted it.",
          cost.last_predicted_ms / 1000.0);
  p.gauge("troupe:step_time_actual_seconds", "The last step's measured time.",
          cost.last_actual_ms / 1000.0);
  p.gauge("troupe:step_time_prediction_error_ratio",
          "Mean |predicted - actual| / actual step time over ~100 recent steps.",
          cost.mean_abs_error_ratio);
  p.gauge("troupe:step_budget_margin_ratio",
          "Share of the budget kept free: steps are planned to max_step_ms / (1 + margin).",
          cost.planning_margin);
  p.gauge("troupe:step_cost_model_seconds",
          "Fitted step cost per unit of each term (fixed, token, context pair, sampled row).",
          {{{{"term", "fixed"}}, cost.fixed_ms / 1000.0},
           {{{"term", "token"}}, cost.per_token_ms / 1000.0},
           {{{"term", "context_pair"}}, cost.per_context_ms / 1000.0},
           {{{"term", "sampled_row"}}, cost.per_sampled_ms / 1000.0}});
  p.counter("troupe:step_budget_cut_steps_total",
            "Steps whose prefill chunks the step-time budget cut.",
            double(cost.num_time_budgeted_steps));
  p.counter("troupe:first_token_steps_total",
            "Steps that ran newcomers' short prompts alone, ahead of the decodes.",
            double(cost.num_first_token_steps));
  p.counter("troupe:interrupted_steps_total",
            "Steps given up in their first half so that a newcomer's first token need not wait "
            "for them.",
            double(cost.num_interrupted_steps));
  p.counter("troupe:interrupted_step_seconds_total",
            "Backend time the interrupted steps had used (work redone in later steps).",
            cost.interrupted_ms / 1000.0);
  const engine::StructuredOutputStats& so = s.structured_output;
  p.counter("troupe:structured_output_masked_steps_total",
            "Steps with at least one grammar-constrained sampling row.", double(so.num_masked_steps));
  p.counter("troupe:structured_output_masked_rows_total", "Grammar bitmask rows filled.",
            double(so.num_masked_rows));
  p.counter("troupe:structured_output_mask_fill_seconds_total",
            "Time the scheduler spent filling grammar bitmasks before steps.",
            so.mask_fill_ms_total / 1000.0);
  // Speculative decoding, as vLLM v1 exports it: its counters vllm:spec_decode_num_drafts,
  // ..._num_draft_tokens and ..._num_accepted_tokens, whose samples prometheus_client names
  // with the _total suffix (what dashboards query).
  const engine::SpeculativeStats& spec = s.speculative;
  p.counter("vllm:spec_decode_num_drafts_total",
            "Verify spans: sequences that had drafts in a step.", double(spec.num_drafts));
  p.counter("vllm:spec_decode_num_draft_tokens_total", "Draft tokens proposed and verified.",
            double(spec.num_draft_tokens));
  p.counter("vllm:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
            double(spec.num_accepted_tokens));
  p.gauge("troupe:num_waiting_clients", "Clients with a request waiting.", s.num_waiting_clients);
  p.counter("troupe:fairness_preemptions_total",
            "Preemptions that made room for a client running fewer sequences.",
            double(s.num_fairness_preemptions));
  if (connections) {
    p.gauge("troupe:http_connections_open", "Open HTTP and WebSocket connections.",
            double(connections->num_open.load(std::memory_order_relaxed)));
    p.counter("troupe:http_connections_accepted_total", "HTTP connections accepted and served.",
              double(connections->num_accepted.load(std::memory_order_relaxed)));
    p.counter("troupe:http_connections_refused_total",
              "HTTP connections answered 503 at http.max_connections.",
              double(connections->num_refused.load(std::memory_order_relaxed)));
    p.counter("troupe:http_accept_failures_total",
              "Failed accepts (EMFILE and the like); the listener backs off after each.",
              double(connections->num_accept_failures.load(std::memory_order_relaxed)));
  }
  render_kv_transfer(p, s.kv_transfer);
  render_router_metrics(p, s);
  return p.str();
}

}  // namespace troupe::net
