// A FakeEngine for net's tests: implements the Engine facade with scripted output on its own
// "ingress" thread (so sinks are called from another thread, as with the real engine), and
// records submits and cancels. It runs no model; handler logic is what is under test.
// A request of n choices gets every piece once per choice (deltas tagged with the index), one
// ChoiceEnd per choice and one final call, as the real engine's ingress sends them.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "actors/engine/engine.hpp"
#include "model/tokenizer.hpp"
#include "tests/net/test_tokenizer.hpp"

namespace troupe::net::testing {

struct FakeScript {
  std::vector<std::string> pieces{"Hel", "lo", " world"};
  std::string finish_reason = "stop";
  std::optional<engine::RequestError> error;  // reported instead of any output
  bool endless = false;                        // "x" deltas until cancelled
  std::chrono::milliseconds tick{2};
};

class FakeEngine final : public engine::Engine {
 public:
  FakeEngine() : tokenizer_(make_test_tokenizer()), worker_([this] { run(); }) {}
  ~FakeEngine() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  FakeScript script;  // set before submitting

  engine::RequestId submit(engine::GenerateRequest request,
                           std::shared_ptr<engine::RequestSink> sink) override {
    std::lock_guard lock(mutex_);
    const engine::RequestId id = next_id_;
    next_id_ += static_cast<engine::RequestId>(std::max(request.n, 1));
    submitted_.push_back(request);
    jobs_.push_back(Job{id, std::move(request), std::move(sink), script, 0});
    ++num_active_;
    cv_.notify_all();
    return id;
  }
  void cancel(engine::RequestId id) override {
    std::lock_guard lock(mutex_);
    cancelled_.insert(id);
    cv_.notify_all();
  }
  engine::EngineStats stats() const override {
    std::lock_guard lock(mutex_);
    engine::EngineStats s;
    s.num_running = static_cast<int32_t>(num_active_);
    s.kv_blocks_total = 100;
    s.kv_blocks_used = 2 * static_cast<int64_t>(num_active_);
    s.kv_usage_ratio = s.kv_blocks_used / 100.0;
    s.generation_tokens_total = 42;
    return s;
  }
  std::vector<engine::RequestInfo> requests() const override { return {}; }
  bool drain(std::chrono::milliseconds) override { return true; }
  int64_t flush_prefix_cache() override { return 0; }
  const model::Tokenizer& tokenizer() const override { return tokenizer_; }
  // Inline: a fake has no threads of its own (the real engine posts to its tokenizer thread).
  void post_tokenizer_work(std::function<void()> work) override { work(); }
  const engine::ModelCard& model_card() const override { return card_; }

  size_t num_cancelled() const {
    std::lock_guard lock(mutex_);
    return cancelled_.size();
  }
  size_t num_active() const {
    std::lock_guard lock(mutex_);
    return num_active_;
  }
  std::vector<engine::GenerateRequest> submitted() const {
    std::lock_guard lock(mutex_);
    return submitted_;
  }
  // Waits up to `timeout` for `predicate` (polled).
  template <typename Predicate>
  static bool eventually(Predicate predicate, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!predicate()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
  }

 private:
  struct Job {
    engine::RequestId id;
    engine::GenerateRequest request;
    std::shared_ptr<engine::RequestSink> sink;
    FakeScript script;
    size_t step;
  };

  // One step of one job; true when it finished. Called without the lock (sinks may re-enter).
  bool step(Job& job, bool cancelled) {
    const int32_t num_choices = std::max(job.request.n, 1);
    if (job.script.error) {
      job.sink->on_error(job.id, *job.script.error);
      return true;
    }
    if (cancelled) return finish(job, "cancelled");
    if (job.script.endless || job.step < job.script.pieces.size()) {
      const std::string text = job.script.endless ? "x" : job.script.pieces[job.step];
      ++job.step;
      for (int32_t index = 0; index < num_choices; ++index) {
        engine::TokenDelta delta;
        delta.index = index;
        delta.text = text;
        delta.num_generated_tokens = static_cast<int32_t>(job.step);
        if (job.request.sampling.logprobs) {
          engine::TokenInfo info{7, delta.text, -0.5f, {{7, -0.5f}, {8, -1.5f}}};
          info.top_logprobs.resize(std::min<size_t>(2, job.request.sampling.top_logprobs));
          delta.tokens.push_back(info);
        }
        if (!job.sink->on_delta(job.id, std::move(delta))) return finish(job, "cancelled");
      }
      return false;
    }
    return finish(job, job.script.finish_reason);
  }

  bool finish(Job& job, const std::string& reason) {
    const int32_t num_choices = std::max(job.request.n, 1);
    for (int32_t index = 0; index < num_choices; ++index) {
      job.sink->on_choice_end(job.id, engine::ChoiceEnd{index, reason, static_cast<int32_t>(job.step)});
    }
    engine::Completion done;
    done.finish_reason = reason;
    done.usage.prompt_tokens = 5;
    done.usage.completion_tokens = static_cast<int32_t>(job.step) * num_choices;
    job.sink->on_finish(job.id, done);
    return true;
  }

  void run() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      if (jobs_.empty()) {
        cv_.wait(lock);
        continue;
      }
      std::deque<Job> batch;
      batch.swap(jobs_);
      const std::set<engine::RequestId> cancelled = cancelled_;
      lock.unlock();
      std::deque<Job> still_running;
      std::chrono::milliseconds tick{1};
      for (Job& job : batch) {
        tick = std::max(tick, job.script.tick);
        if (!step(job, cancelled.contains(job.id))) still_running.push_back(std::move(job));
      }
      std::this_thread::sleep_for(tick);
      lock.lock();
      num_active_ -= batch.size() - still_running.size();
      jobs_.insert(jobs_.begin(), std::make_move_iterator(still_running.begin()),
                   std::make_move_iterator(still_running.end()));
    }
  }

  model::Tokenizer tokenizer_;
  engine::ModelCard card_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::set<engine::RequestId> cancelled_;
  std::vector<engine::GenerateRequest> submitted_;
  engine::RequestId next_id_ = 1;
  size_t num_active_ = 0;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace troupe::net::testing
