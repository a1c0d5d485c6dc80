// Serving metrics kept by the front (latency histograms and request counters fed from each
// request's RequestRecord, on every surface: HTTP, WebSocket, batch) and
// the Prometheus text exposition of them together with the engine's own counters (/metrics).
//
// Thread-safety: Histogram and ServingMetrics are lock-free and may be updated from any thread;
// PrometheusText is a plain single-thread builder.
#pragma once

#include <functional>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "actors/batch/batch_stats.hpp"
#include "actors/messages/engine_types.hpp"
#include "net/connection_metrics.hpp"
#include "net/rate_limits.hpp"

namespace troupe::net {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative_counts;  // per bound; the +Inf bucket is `count`
    uint64_t count = 0;
    double sum = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> upper_bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // one per bound, plus +Inf
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// Latencies in seconds, as Prometheus conventions (and vLLM) have them.
struct ServingMetrics {
  ServingMetrics();
  Histogram time_to_first_token_s;
  Histogram inter_token_latency_s;
  Histogram e2e_latency_s;
  Histogram queue_time_s;
  std::atomic<uint64_t> finished_stop{0};
  std::atomic<uint64_t> finished_length{0};
  std::atomic<uint64_t> finished_cancelled{0};
  std::atomic<uint64_t> failed{0};
  std::array<std::atomic<uint64_t>, 3> by_kind{};  // engine::RequestKind, finished or failed

  // The latency histograms of one finished engine request.
  void observe_latencies(const engine::Completion& completion);
  // The request counters. RequestRecord (net/request_record.hpp) is their only caller, so that
  // each request is counted exactly once.
  void count_finished(std::string_view finish_reason);
  void count_failed() { failed.fetch_add(1, std::memory_order_relaxed); }
  void count_kind(engine::RequestKind kind) {
    by_kind[static_cast<size_t>(kind)].fetch_add(1, std::memory_order_relaxed);
  }
  // The durable batches' progress (issue 40). Set once, before the server starts; unset: no
  // batch metrics.
  void set_batch_stats(std::function<batch::BatchStats()> stats) { batch_stats = std::move(stats); }
  std::function<batch::BatchStats()> batch_stats;

  // Every API key's requests and tokens per minute (issue 41): admitted by the surfaces, spent
  // by RequestRecord as requests end. Its limits come from the access policy (set at start and
  // on each key reload); without any, everything is admitted.
  KeyRateLimiter rate_limits;
};

// Prometheus text exposition format 0.0.4.
class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;
  explicit PrometheusText(Labels common_labels = {}) : common_(std::move(common_labels)) {}

  void gauge(std::string_view name, std::string_view help, double value);
  void gauge(std::string_view name, std::string_view help,
             const std::vector<std::pair<Labels, double>>& samples);
  void counter(std::string_view name, std::string_view help, double value);
  // One counter family with a sample per label set.
  void counter(std::string_view name, std::string_view help,
               const std::vector<std::pair<Labels, double>>& samples);
  void histogram(std::string_view name, std::string_view help, const Histogram::Snapshot& h);
  void summary(std::string_view name, std::string_view help,
               const std::vector<std::pair<double, double>>& quantile_values);

  const std::string& str() const { return out_; }

 private:
  void header(std::string_view name, std::string_view help, std::string_view type);
  void sample(std::string_view name, const Labels& extra, double value);

  Labels common_;
  std::string out_;
};

// `connections` may be null (no listener counters to show).
std::string render_metrics(const engine::EngineStats& stats, const ServingMetrics& serving,
                           std::string_view model_name,
                           const ConnectionMetrics* connections = nullptr);

}  // namespace troupe::net
