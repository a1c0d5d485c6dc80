// A synchronous Engine for the harnesses that drive net/ handlers (HTTP routes, WebSocket chat,
// admin commands). submit() only queues; run_until_idle() then plays every queued request to
// its end on the caller's thread, in the order the real ingress thread keeps (deltas, then
// exactly one on_finish or on_error), including requests submitted while it runs (batch items,
// n > 1 choices). No threads and no clocks: one fuzz input is one whole exchange, reproducible.
//
// How each request ends comes from a script byte the harness takes from its input, so the
// fuzzer also explores error paths (queue full, draining, prompt too long) and cancellation.
//
// Thread-safety: single-threaded, like the harness that owns it.
#pragma once

#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "actors/engine/engine.hpp"
#include "model/tokenizer.hpp"
#include "tests/net/test_tokenizer.hpp"

namespace troupe::fuzz {

class FuzzEngine final : public engine::Engine {
 public:
  FuzzEngine() : tokenizer_(net::testing::make_test_tokenizer()) {
    card_.info.id = "smollm2";
    card_.info.context_length = 2048;
    card_.backend = "cpu";
  }

  // Bits of `script` decide how each request ends (rotated per request): 0-1 the number of
  // deltas (0..3), 2 error instead of finish, 3-5 the error code or finish reason, 6 whether a
  // delta carries odd bytes (a split UTF-8 character, quotes, a NUL).
  uint8_t script = 0;
  // Labels exposed through requests() (the admin `requests` reply prints them).
  std::string odd_label;

  engine::RequestId submit(engine::GenerateRequest request,
                           std::shared_ptr<engine::RequestSink> sink) override {
    const engine::RequestId id = next_id_++;
    if (draining_) {
      sink->on_error(id, {engine::ErrorCode::kDraining, "draining", ""});
      return id;
    }
    jobs_.push_back(Job{id, std::move(request), std::move(sink)});
    ++num_submitted_;
    return id;
  }
  void cancel(engine::RequestId id) override { cancelled_.insert(id); }

  // Plays every queued request to its end. Bounded: a handler that keeps submitting forever
  // would be a finding, and the harness checks jobs() is empty afterwards.
  void run_until_idle(size_t max_jobs = 4096) {
    for (size_t n = 0; n < max_jobs && !jobs_.empty(); ++n) {
      Job job = std::move(jobs_.front());
      jobs_.pop_front();
      play(job);
    }
  }
  size_t num_pending() const { return jobs_.size(); }
  size_t num_submitted() const { return num_submitted_; }

  engine::EngineStats stats() const override {
    engine::EngineStats s;
    s.num_running = static_cast<int32_t>(jobs_.size());
    s.kv_blocks_total = 100;
    s.tokens_per_s_10s = 1.0 / 3.0;
    s.draining = draining_;
    return s;
  }
  std::vector<engine::RequestInfo> requests() const override {
    std::vector<engine::RequestInfo> out;
    for (const Job& job : jobs_) {
      engine::RequestInfo info;
      info.request_id = job.id;
      info.client_label = job.request.client_label;
      info.client = job.request.client;
      out.push_back(info);
    }
    engine::RequestInfo odd;
    odd.request_id = 7;
    odd.client_label = odd_label;
    odd.client = odd_label;
    out.push_back(odd);
    return out;
  }
  bool drain(std::chrono::milliseconds) override {
    draining_ = true;
    return true;
  }
  int64_t flush_prefix_cache() override { return 3; }
  const model::Tokenizer& tokenizer() const override { return tokenizer_; }
  void post_tokenizer_work(std::function<void()> work) override { work(); }
  const engine::ModelCard& model_card() const override { return card_; }

 private:
  struct Job {
    engine::RequestId id;
    engine::GenerateRequest request;
    std::shared_ptr<engine::RequestSink> sink;
  };

  void play(Job& job) {
    const unsigned rotate = static_cast<unsigned>(job.id % 8);
    const uint8_t bits = static_cast<uint8_t>((script >> rotate) | (script << (8 - rotate)));
    const int num_deltas = bits & 3;
    engine::Completion done;
    done.usage.prompt_tokens = 3;
    static constexpr engine::ErrorCode kErrors[] = {
        engine::ErrorCode::kInvalidRequest, engine::ErrorCode::kPromptTooLong,
        engine::ErrorCode::kQueueFull, engine::ErrorCode::kDraining, engine::ErrorCode::kInternal};
    if (bits & 4) {
      const engine::ErrorCode code = kErrors[((bits >> 3) & 7) % 5];
      job.sink->on_error(job.id, {code, "refused: \"\xFF\" <|im_end|>", "prompt"});
      return;
    }
    for (int i = 0; i < num_deltas; ++i) {
      if (cancelled_.contains(job.id)) break;
      engine::TokenDelta delta;
      // A split UTF-8 character, JSON specials and a NUL: writers must still emit valid JSON.
      delta.text = (bits & 64) ? std::string("\xC3\"\\\n\0x", 6) : std::string("He\xC3\xA9");
      delta.num_generated_tokens = i + 1;
      if (job.request.sampling.logprobs) {
        engine::TokenInfo info{7, delta.text, -0.5f, {}};
        for (int32_t k = 0; k < job.request.sampling.top_logprobs; ++k) {
          info.top_logprobs.emplace_back(k, -1.0f - static_cast<float>(k));
        }
        delta.tokens.push_back(info);
      }
      done.usage.completion_tokens = i + 1;
      if (!job.sink->on_delta(job.id, std::move(delta))) {
        cancelled_.insert(job.id);
        break;
      }
    }
    static constexpr const char* kReasons[] = {"stop", "length", "stop", "length"};
    done.finish_reason = cancelled_.contains(job.id) ? "cancelled" : kReasons[(bits >> 3) & 3];
    job.sink->on_finish(job.id, done);
  }

  model::Tokenizer tokenizer_;
  engine::ModelCard card_;
  std::deque<Job> jobs_;
  std::set<engine::RequestId> cancelled_;
  engine::RequestId next_id_ = 1;
  size_t num_submitted_ = 0;
  bool draining_ = false;
};

}  // namespace troupe::fuzz
