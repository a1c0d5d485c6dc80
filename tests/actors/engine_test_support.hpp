// Shared pieces of the engine tests: the default model's path, an engine config for tests, and
// a sink that records everything it is told (a test double, not a fake model: the model is real).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "actors/engine/engine.hpp"
#include "actors/engine/engine_config.hpp"
#include "tests/support/source_dir.hpp"

namespace troupe::engine::testing {

using ::troupe::test_support::default_model_path;

inline EngineConfig test_config() {
  EngineConfig config;
  config.model_path = default_model_path();
  config.backend = BackendKind::kCpu;
  config.cpu.kv_memory_bytes = 64ll << 20;
  return config;
}

// Records every sink call; wait() blocks until the final one (on_finish or on_error).
class RecordingSink final : public RequestSink {
 public:
  // on_delta answers false ("client gone") from the `close_after`-th delta on.
  explicit RecordingSink(int close_after = -1) : close_after_(close_after) {}

  bool on_delta(RequestId, TokenDelta delta) override {
    std::lock_guard lock(mutex_);
    if (ended_) ++calls_after_end_;
    text_ += delta.text;
    for (const TokenInfo& t : delta.tokens) {
      token_ids_.push_back(t.token_id);
      choice_token_ids_[delta.index].push_back(t.token_id);
    }
    ++num_deltas_;
    return close_after_ < 0 || num_deltas_ < close_after_;
  }
  void on_choice_end(RequestId, const ChoiceEnd& end) override {
    std::lock_guard lock(mutex_);
    if (ended_) ++calls_after_end_;
    choice_ends_.push_back(end);
  }
  void on_finish(RequestId, Completion completion) override {
    std::lock_guard lock(mutex_);
    completion_ = std::move(completion);
    end_locked();
  }
  void on_error(RequestId, RequestError error) override {
    std::lock_guard lock(mutex_);
    error_ = std::move(error);
    end_locked();
  }

  bool wait(std::chrono::seconds timeout = std::chrono::seconds(120)) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [this] { return ended_; });
  }
  bool ended() {
    std::lock_guard lock(mutex_);
    return ended_;
  }
  int num_deltas() {
    std::lock_guard lock(mutex_);
    return num_deltas_;
  }
  std::string text() {
    std::lock_guard lock(mutex_);
    return text_;
  }
  std::vector<int32_t> token_ids() {
    std::lock_guard lock(mutex_);
    return token_ids_;
  }
  // n > 1: choice `index`'s token ids (the request must ask for logprobs).
  std::vector<int32_t> choice_token_ids(int32_t index) {
    std::lock_guard lock(mutex_);
    return choice_token_ids_[index];
  }
  std::vector<ChoiceEnd> choice_ends() {
    std::lock_guard lock(mutex_);
    return choice_ends_;
  }
  std::optional<Completion> completion() {
    std::lock_guard lock(mutex_);
    return completion_;
  }
  std::optional<RequestError> error() {
    std::lock_guard lock(mutex_);
    return error_;
  }
  int calls_after_end() {
    std::lock_guard lock(mutex_);
    return calls_after_end_;
  }

 private:
  // The request's end (finish or error), under mutex_; a second one is counted, never hidden.
  void end_locked() {
    if (ended_) ++calls_after_end_;
    ended_ = true;
    cv_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  int close_after_;
  int num_deltas_ = 0;
  std::string text_;
  std::vector<int32_t> token_ids_;
  std::map<int32_t, std::vector<int32_t>> choice_token_ids_;
  std::vector<ChoiceEnd> choice_ends_;
  std::optional<Completion> completion_;
  std::optional<RequestError> error_;
  bool ended_ = false;
  int calls_after_end_ = 0;
};

inline GenerateRequest greedy_chat(std::string user, int32_t max_tokens) {
  GenerateRequest request;
  request.messages.push_back({"user", std::move(user)});
  request.sampling.temperature = 0.0f;
  request.sampling.logprobs = true;  // so the sink sees token ids
  request.stop.max_tokens = max_tokens;
  return request;
}

// What one request ended with: its text, finish reason, or error.
struct Answer {
  std::string text;
  std::string finish_reason;
  std::optional<RequestError> error;
};

// Submits one request and waits for its end.
inline Answer run_to_end(Engine& engine, GenerateRequest request) {
  auto sink = std::make_shared<RecordingSink>();
  engine.submit(std::move(request), sink);
  EXPECT_TRUE(sink->wait());
  return {sink->text(), sink->completion() ? sink->completion()->finish_reason : "", sink->error()};
}

// Runs each prompt alone, then all of them at once, and expects every request to give the same
// greedy tokens both ways (continuous batching must not change anyone's output).
inline void expect_batched_equals_solo(Engine& engine, const std::vector<std::string>& prompts,
                                       int32_t max_tokens) {
  std::vector<std::vector<int32_t>> alone;
  for (const std::string& prompt : prompts) {
    auto sink = std::make_shared<RecordingSink>();
    engine.submit(greedy_chat(prompt, max_tokens), sink);
    ASSERT_TRUE(sink->wait());
    ASSERT_FALSE(sink->error()) << sink->error()->message;
    alone.push_back(sink->token_ids());
  }
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (const std::string& prompt : prompts) {
    sinks.push_back(std::make_shared<RecordingSink>());
    engine.submit(greedy_chat(prompt, max_tokens), sinks.back());
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(sinks[i]->wait());
    EXPECT_EQ(sinks[i]->token_ids(), alone[i]) << prompts[i];
  }
}

// Waits until the engine reports no running or waiting request and no KV block in use.
inline bool wait_idle(const Engine& engine, std::chrono::seconds timeout = std::chrono::seconds(30)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    const EngineStats s = engine.stats();
    if (s.num_running == 0 && s.num_waiting == 0 && s.kv_blocks_used == 0 &&
        engine.requests().empty()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

#define TROUPE_REQUIRE_MODEL()                                                        \
  do {                                                                                \
    if (!std::filesystem::exists(::troupe::engine::testing::default_model_path())) {  \
      GTEST_SKIP() << "default model not found; run scripts/setup";                   \
    }                                                                                 \
  } while (0)

}  // namespace troupe::engine::testing
