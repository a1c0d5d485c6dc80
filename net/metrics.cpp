#include "net/metrics.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <span>

#include <fmt/format.h>

#include "net/stats_schema.hpp"

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

// Every schema stat that has a metric name (stats_schema.hpp): consecutive stats of one name
// (each with its label) are one family.
void render_schema(PrometheusText& p, const engine::EngineStats& s) {
  const std::span<const Stat> stats = engine_stats_schema();
  for (size_t i = 0; i < stats.size();) {
    const Stat& head = stats[i];
    if (head.metric.empty() || head.kind == StatKind::kText) {
      ++i;
      continue;
    }
    std::vector<std::pair<PrometheusText::Labels, double>> samples;
    size_t j = i;
    for (; j < stats.size() && stats[j].metric == head.metric; ++j) {
      PrometheusText::Labels labels;
      if (const std::string_view l = stats[j].label; !l.empty()) {
        const size_t eq = l.find('=');
        labels.emplace_back(std::string(l.substr(0, eq)), std::string(l.substr(eq + 1)));
      }
      samples.emplace_back(std::move(labels), stats[j].value(s) * stats[j].metric_scale);
    }
    if (head.kind == StatKind::kCounter) {
      p.counter(head.metric, head.help, samples);
    } else {
      p.gauge(head.metric, head.help, samples);
    }
    i = j;
  }
}

// What net/ measures itself: request outcomes and latencies on every surface (HTTP, WebSocket,
// batch items), and the listener's connections.
// Each API key's use and refusals (its name as the label: the keys are configured, so the label
// set is bounded); nothing when no key is configured.
void render_api_keys(PrometheusText& p, const std::vector<KeyUsage>& keys) {
  if (keys.empty()) return;
  std::vector<std::pair<PrometheusText::Labels, double>> requests, tokens, refused, left;
  for (const KeyUsage& k : keys) {
    const PrometheusText::Labels key{{"key", k.name}};
    requests.push_back({key, double(k.requests)});
    tokens.push_back({key, double(k.tokens)});
    refused.push_back({key, double(k.refused)});
    if (k.status.limits.requests_per_minute > 0) {
      left.push_back({{{"key", k.name}, {"limit", "requests"}}, double(k.status.remaining_requests)});
    }
    if (k.status.limits.tokens_per_minute > 0) {
      left.push_back({{{"key", k.name}, {"limit", "tokens"}}, double(k.status.remaining_tokens)});
    }
  }
  p.counter("troupe:api_key_requests_total", "Requests admitted, by API key name.", requests);
  p.counter("troupe:api_key_tokens_total",
            "Tokens (prompt + completion) of finished requests, by API key name.", tokens);
  p.counter("troupe:api_key_rate_limited_total",
            "Requests refused with 429 by the key's requests or tokens per minute.", refused);
  if (!left.empty()) {
    p.gauge("troupe:api_key_rate_limit_remaining",
            "What is left of a limited key's requests or tokens per minute now.", left);
  }
}

void render_serving(PrometheusText& p, const ServingMetrics& serving,
                    const ConnectionMetrics* connections) {
  p.counter("troupe:request_success_total",
            "Requests finished (HTTP, WebSocket, batch items), by finish reason.",
            {{{{"finished_reason", "stop"}}, double(serving.finished_stop.load())},
             {{{"finished_reason", "length"}}, double(serving.finished_length.load())},
             {{{"finished_reason", "cancelled"}}, double(serving.finished_cancelled.load())}});
  p.counter("troupe:request_failure_total",
            "Requests that ended in an error or were refused (HTTP, WebSocket, batch items).",
            double(serving.failed.load()));
  {
    std::vector<std::pair<PrometheusText::Labels, double>> kinds;
    for (const engine::RequestKind kind :
         {engine::RequestKind::kGenerate, engine::RequestKind::kEmbedding, engine::RequestKind::kScore}) {
      kinds.push_back({{{"kind", std::string(engine::to_string(kind))}},
                       double(serving.by_kind[static_cast<size_t>(kind)].load())});
    }
    p.counter("troupe:requests_by_kind_total",
              "Requests ended (finished or failed), by what they computed: text, an embedding, or "
              "a prompt's scores alone (echo with max_tokens 0).",
              kinds);
  }
  if (serving.batch_stats) {
    const batch::BatchStats b = serving.batch_stats();
    p.counter("troupe:batch_items_total", "Items of /v1/batches batches answered, by outcome (the output or the error file).",
              {{{{"outcome", "succeeded"}}, double(b.items_succeeded)}, {{{"outcome", "failed"}}, double(b.items_failed)}});
    p.gauge("troupe:batch_items_in_flight", "Items of /v1/batches batches in the engine now.", double(b.items_in_flight));
    p.gauge("troupe:batch_items_queued", "Items of live /v1/batches batches not yet in the engine.", double(b.items_queued));
    p.gauge("troupe:batches_live", "Batches validating, in progress, finalizing or cancelling.", double(b.live_batches));
  }
  render_api_keys(p, serving.rate_limits.usage(steady_now_s()));
  p.histogram("troupe:time_to_first_token_seconds", "Time to first token.",
              serving.time_to_first_token_s.snapshot());
  p.histogram("troupe:inter_token_latency_seconds", "Time between streamed tokens.",
              serving.inter_token_latency_s.snapshot());
  p.histogram("troupe:e2e_request_latency_seconds", "Submit to finish.",
              serving.e2e_latency_s.snapshot());
  p.histogram("troupe:request_queue_time_seconds", "Submit to first scheduled.",
              serving.queue_time_s.snapshot());
  if (connections == nullptr) return;
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

// The engine's distributions (quantiles or buckets) and its info gauges, whose values are labels.
void render_distributions_and_info(PrometheusText& p, const engine::EngineStats& s) {
  // The engine publishes step-time quantiles only, hence a summary rather than a histogram.
  p.summary("troupe:step_time_seconds", "Engine step time.",
            {{0.5, s.step_time.p50_ms / 1000.0}, {0.99, s.step_time.p99_ms / 1000.0}});
  const engine::KvTransferStats& t = s.kv_transfer;
  p.gauge("troupe:kv_transfer_info", "This server's part in disaggregated prefill/decode.",
          {{{{"role", t.role}, {"engine_id", t.engine_id}, {"transport", t.transport}}, 1.0}});
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
  // What a router scores pods by (issue 20): the Gateway API Inference Extension's model-server
  // protocol under vLLM's names. vLLM sets the LoRA gauge to the time of its last update so a
  // picker can take the newest series; a picker treats a pod without it as unable to serve
  // adapters. troupe serves none: max_lora 0 and both lists empty.
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  p.gauge("vllm:lora_requests_info", "Running stats on LoRA requests (vLLM name).",
          {{{{"max_lora", "0"}, {"running_lora_adapters", ""}, {"waiting_lora_adapters", ""}}, now}});
  // vLLM's info gauge: value 1, the cache config in labels (the picker reads block_size and
  // num_gpu_blocks; cache_dtype is cache.kv_dtype's name; the rest say how blocks are hashed:
  // kv_events.hash_seed is not shown).
  p.gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig (vLLM name).",
          {{{{"block_size", std::to_string(s.kv_block_size)},
             {"num_gpu_blocks", std::to_string(s.kv_blocks_total)},
             {"cache_dtype", s.kv_cache_dtype},
             {"enable_prefix_caching", s.prefix_caching ? "True" : "False"},
             {"prefix_caching_hash_algo", "sha256_cbor"}},
            1.0}});
}

}  // namespace

std::string render_metrics(const engine::EngineStats& s, const ServingMetrics& serving,
                           std::string_view model_name, const ConnectionMetrics* connections) {
  PrometheusText p(PrometheusText::Labels{{"model_name", std::string(model_name)}});
  render_schema(p, s);
  render_serving(p, serving, connections);
  render_distributions_and_info(p, s);
  return p.str();
}

}  // namespace troupe::net
