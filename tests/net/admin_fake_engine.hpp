// A test double of the Engine facade for the admin socket's tests: stats and the live request
// list are set by the test, cancels and flushes are recorded. It runs no model and generates
// nothing (submit is refused): the admin surface only reads snapshots and sends controls.
#pragma once

#include <mutex>
#include <vector>

#include "actors/engine/engine.hpp"
#include "tests/net/fake_engine.hpp"

namespace troupe::net::testing {

// A stats snapshot whose reported fields all hold distinct values, so a reply or a printout
// that shows one field in another's place is caught: 2 running, 1 waiting, 3 preempted; KV
// blocks 10 used, 20 cached, 70 free of 100; up 1h 02m 05s.
inline engine::EngineStats sample_stats() {
  return {.num_waiting = 1,
          .num_running = 2,
          .num_preempted = 3,
          .kv_blocks_total = 100,
          .kv_blocks_used = 10,
          .kv_blocks_cached = 20,
          .kv_blocks_free = 70,
          .kv_usage_ratio = 0.1,
          .prefix_cache_hit_rate = 0.25,
          .tokens_per_s_10s = 12.5,
          .step_time = {4.0, 9.0},
          .time_to_first_token = {30.0, 80.0},
          .uptime_s = 3725};
}

class AdminFakeEngine final : public engine::Engine {
 public:
  AdminFakeEngine() : tokenizer_(make_test_tokenizer()) {
    card_.info.id = "fake-model";
    card_.backend = "cpu";
  }

  void set_stats(const engine::EngineStats& stats) {
    std::lock_guard lock(mutex_);
    stats_ = stats;
  }
  void set_requests(std::vector<engine::RequestInfo> requests) {
    std::lock_guard lock(mutex_);
    requests_ = std::move(requests);
  }
  std::vector<engine::RequestId> cancelled() const {
    std::lock_guard lock(mutex_);
    return cancelled_;
  }
  int num_flushes() const {
    std::lock_guard lock(mutex_);
    return num_flushes_;
  }
  int num_stats_calls() const {
    std::lock_guard lock(mutex_);
    return num_stats_calls_;
  }

  engine::RequestId submit(engine::GenerateRequest, std::shared_ptr<engine::RequestSink> sink) override {
    engine::RequestError error{engine::ErrorCode::kDraining, "admin fake engine generates nothing", ""};
    sink->on_error(0, error);
    return 0;
  }
  void cancel(engine::RequestId request_id) override {
    std::lock_guard lock(mutex_);
    cancelled_.push_back(request_id);
    std::erase_if(requests_, [&](const engine::RequestInfo& r) { return r.request_id == request_id; });
  }
  engine::EngineStats stats() const override {
    std::lock_guard lock(mutex_);
    ++num_stats_calls_;
    return stats_;
  }
  std::vector<engine::RequestInfo> requests() const override {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  bool drain(std::chrono::milliseconds) override { return true; }
  int64_t flush_prefix_cache() override {
    std::lock_guard lock(mutex_);
    ++num_flushes_;
    return 7;
  }
  const model::Tokenizer& tokenizer() const override { return tokenizer_; }
  // Inline: a fake has no threads of its own (the real engine posts to its tokenizer thread).
  void post_tokenizer_work(std::function<void()> work) override { work(); }
  const engine::ModelCard& model_card() const override { return card_; }

 private:
  model::Tokenizer tokenizer_;
  engine::ModelCard card_;
  mutable std::mutex mutex_;
  engine::EngineStats stats_;
  std::vector<engine::RequestInfo> requests_;
  std::vector<engine::RequestId> cancelled_;
  int num_flushes_ = 0;
  mutable int num_stats_calls_ = 0;
};

}  // namespace troupe::net::testing
