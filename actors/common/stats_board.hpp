// StatsBoard: where the actors publish read-only snapshots for the Engine facade's stats() and
// requests(). Each actor replaces its own snapshot (an immutable object behind an atomic
// shared_ptr) after each step; readers on any thread take the latest without waiting on an actor
// and without a lock on the request path.
//
// Thread-safety: publish_* from the owning actor's executor only (one writer per snapshot);
// load_* from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "actors/messages/engine_types.hpp"
#include "actors/messages/scheduler_types.hpp"

namespace troupe::engine {

// The last `capacity` samples, and their p50/p99. Owned by one actor.
class RollingLatency {
 public:
  explicit RollingLatency(size_t capacity = 1024) : capacity_(capacity) {}
  void add(double milliseconds);
  LatencySummary summary() const;

 private:
  size_t capacity_;
  std::deque<double> samples_;
};

// Events per second over a sliding time window. Owned by one actor.
class RollingRate {
 public:
  explicit RollingRate(std::chrono::milliseconds window) : window_(window) {}
  void add(std::chrono::steady_clock::time_point at, uint64_t count);
  double per_second(std::chrono::steady_clock::time_point now) const;

 private:
  void expire(std::chrono::steady_clock::time_point now);
  std::chrono::milliseconds window_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, uint64_t>> events_;
  uint64_t total_ = 0;
};

struct SchedulerSnapshot {
  scheduler::SchedulerStats stats;
  std::vector<scheduler::SlotInfo> slots;
  LatencySummary step_time;
  double total_tick_ms = 0;
  double total_device_ms = 0;
  StepCostStats step_cost;
  StepAccount step_account;
  StructuredOutputStats structured_output;
};

// KV movement between servers (disaggregated prefill/decode), as the kv-cache actor counts it.
struct KvCacheSnapshot {
  kv_cache::KvCacheStats stats;
  uint64_t num_loans = 0;  // ticks the scheduler borrowed the manager for
  KvTransferStats transfer;
  kv_cache::KvEventStats events;  // KV events published / dropped (zero when off)
};

struct LiveRequestSummary {
  RequestId request_id = 0;
  std::string client_label;
  std::string client;
  RequestOrigin origin = RequestOrigin::kHttp;
  std::chrono::steady_clock::time_point submitted_at;
};

struct IngressSnapshot {
  std::vector<LiveRequestSummary> live;
  LatencySummary time_to_first_token;
  double tokens_per_s = 0;
  uint64_t num_refused = 0;  // refused before reaching the scheduler (validation, overload)
  uint64_t num_remote_prefills = 0;  // decode role: prompts sent to prefill servers
  uint64_t num_remote_prefill_fallbacks = 0;
};

class StatsBoard {
 public:
  StatsBoard();
  void publish_scheduler(SchedulerSnapshot snapshot);
  void publish_ingress(IngressSnapshot snapshot);
  void publish_kv_cache(KvCacheSnapshot snapshot);
  std::shared_ptr<const SchedulerSnapshot> load_scheduler() const;
  std::shared_ptr<const IngressSnapshot> load_ingress() const;
  std::shared_ptr<const KvCacheSnapshot> load_kv_cache() const;

 private:
  std::atomic<std::shared_ptr<const SchedulerSnapshot>> scheduler_;
  std::atomic<std::shared_ptr<const IngressSnapshot>> ingress_;
  std::atomic<std::shared_ptr<const KvCacheSnapshot>> kv_cache_;
};

}  // namespace troupe::engine
