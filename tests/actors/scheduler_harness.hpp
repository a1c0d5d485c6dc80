// SchedulerHarness: drives a Scheduler with the FakeStepModel one step at a time, records every
// request's generated tokens and finish reason, and checks the invariants after each step.
//
// Thread-safety: test helper; one thread.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/scheduler/scheduler.hpp"
#include "fake_step_model.hpp"

namespace troupe::scheduler::testing {

inline FakeModelConfig fake_config_for(const SchedulerConfig& config, uint64_t eos_one_in,
                                       int32_t copy_period = 0) {
  FakeModelConfig fake;
  fake.copy_period = copy_period;
  fake.num_blocks = config.num_blocks;
  fake.block_size = config.block_size;
  fake.eos_token_id = config.eos_token_ids.empty() ? 2 : config.eos_token_ids.front();
  fake.eos_one_in = eos_one_in;
  fake.num_kv_groups = config.num_kv_groups;
  fake.sliding_window = config.sliding_window;
  return fake;
}

// The small scheduler most tests run; a test changes what its case needs.
inline SchedulerConfig small_config() {
  return {.max_num_seqs = 8,
          .max_num_batched_tokens = 64,
          .chunked_prefill_size = 32,
          .max_model_len = 512,
          .max_queue = 16,
          .block_size = 16,
          .num_blocks = 64,
          .eos_token_ids = {2}};
}

class SchedulerHarness {
 public:
  // eos_one_in: how often the fake model stops by itself; huge = practically never.
  // copy_period: see FakeModelConfig (a repeating text, for speculative decoding).
  explicit SchedulerHarness(const SchedulerConfig& config, uint64_t eos_one_in = 1ULL << 62,
                            int32_t copy_period = 0)
      : scheduler(config), model(fake_config_for(config, eos_one_in, copy_period)) {}

  AddResult add(RequestId id, std::vector<int32_t> prompt, int32_t max_tokens,
                Priority priority = Priority::kNormal, bool ignore_eos = false,
                std::string client = "") {
    NewRequest request;
    request.client = std::move(client);
    request.request_id = id;
    request.prompt_token_ids = std::move(prompt);
    request.stop.max_tokens = max_tokens;
    request.stop.ignore_eos = ignore_eos;
    request.priority = priority;
    const AddResult result = scheduler.add_request(request);
    if (result == AddResult::kAccepted) requests[id] = std::move(request);
    return result;
  }

  // A request of `client` (normal priority, EOS honoured).
  AddResult add_for(std::string client, RequestId id, std::vector<int32_t> prompt,
                    int32_t max_tokens) {
    return add(id, std::move(prompt), max_tokens, Priority::kNormal, false, std::move(client));
  }

  // One full step. nullopt when nothing was runnable.
  std::optional<StepPlan> step() {
    StepPlan plan = scheduler.schedule();
    if (plan.empty()) return std::nullopt;
    const gpu::StepResult result = model.run(plan.batch);
    record(scheduler.on_step_complete(result));
    check();
    return plan;
  }

  void record(const StepUpdate& update) {
    for (const GeneratedToken& token : update.tokens) outputs[token.request_id].push_back(token.token_id);
    for (const FinishedSequence& finished : update.finished) reasons[finished.request_id] = finished.reason;
  }

  void check() const {
    EXPECT_EQ(model.error(), "");
    const auto error = scheduler.check_invariants();
    EXPECT_FALSE(error.has_value()) << *error;
  }

  int run_until_idle(int max_steps = 10000) {
    int steps = 0;
    while (scheduler.has_unfinished_requests() && steps < max_steps) {
      if (!step()) break;
      ++steps;
    }
    return steps;
  }

  std::vector<int32_t> expected_output(RequestId id) const {
    const NewRequest& request = requests.at(id);
    return FakeStepModel::reference_output(request.prompt_token_ids, request.stop,
                                           scheduler.config().max_model_len, model.config());
  }

  Scheduler scheduler;
  FakeStepModel model;
  std::map<RequestId, NewRequest> requests;
  std::map<RequestId, std::vector<int32_t>> outputs;
  std::map<RequestId, FinishReason> reasons;
};

// The plan's slice of sequence `id`, or nullptr when the step does not run it.
inline const gpu::SequenceSlice* slice_of(const StepPlan& plan, RequestId id) {
  for (const auto& slice : plan.batch.seqs) {
    if (slice.seq_id == id) return &slice;
  }
  return nullptr;
}

// The sequences a plan runs, in batch order.
inline std::vector<RequestId> ids_in(const StepPlan& plan) {
  std::vector<RequestId> ids;
  for (const auto& slice : plan.batch.seqs) ids.push_back(slice.seq_id);
  return ids;
}

// Request `id`'s token in a step's (or KV work's) update, or nullptr.
inline const GeneratedToken* token_of(const StepUpdate& update, RequestId id) {
  for (const auto& token : update.tokens) {
    if (token.request_id == id) return &token;
  }
  return nullptr;
}

// Tokens [first, first + n).
inline std::vector<int32_t> token_range(int32_t n, int32_t first) {
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < n; ++i) tokens.push_back(first + i);
  return tokens;
}

}  // namespace troupe::scheduler::testing
