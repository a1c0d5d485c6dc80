// Helpers for the disaggregated prefill/decode policy tests (scheduler_remote_kv_test.cpp,
// scheduler_remote_kv_groups_test.cpp): two SchedulerHarnesses stand for a prefill and a decode
// server, and a "pull" copies blocks between their fake KV stores as a KvPullOrder says
// (FakeStepModel: scheduler tests only).
//
// Thread-safety: test helpers; one thread.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "actors/scheduler/scheduler.hpp"
#include "scheduler_harness.hpp"

namespace troupe::scheduler::testing {

// Every structural invariant of the policy, and the fake model saw no bad block table.
#define ASSERT_INVARIANTS(harness)                                                       \
  do {                                                                                   \
    const std::optional<std::string> violation = (harness).scheduler.check_invariants(); \
    ASSERT_FALSE(violation.has_value()) << *violation;                                   \
    ASSERT_EQ((harness).model.error(), "");                                              \
  } while (false)

// Runs a planned step through the fake model and hands its result to the policy.
inline StepUpdate complete(SchedulerHarness& h, const StepPlan& plan) {
  StepUpdate update = h.scheduler.on_step_complete(h.model.run(plan.batch));
  h.record(update);
  return update;
}

// The policy's out-of-step work; its events (a remote first token, early finishes) are
// recorded like a step's.
inline KvWork take_work(SchedulerHarness& h) {
  KvWork work = h.scheduler.take_kv_work();
  h.record(work.events);
  return work;
}

// The kv-cache actor's pull, done on the fake models' KV stores.
inline void pull(SchedulerHarness& decode, const SchedulerHarness& prefill,
                 const KvPullOrder& order) {
  for (const BlockCopy& copy : order.copies) {
    decode.model.copy_block_from(prefill.model, copy.source, copy.destination);
  }
}

// Steps until nothing is left to run, checking the invariants after each.
inline void run_until_idle(SchedulerHarness& h) {
  for (int step = 0; step < 1000 && h.scheduler.has_unfinished_requests(); ++step) {
    const StepPlan plan = h.scheduler.schedule();
    if (plan.empty()) break;
    complete(h, plan);
    ASSERT_INVARIANTS(h);
  }
}

// The prefill server's half of one request: computes `prompt` under hold_kv_when_finished with
// max_tokens 1. What finished, or nullopt if it never did.
inline std::optional<FinishedSequence> prefill_and_hold(SchedulerHarness& prefill, RequestId id,
                                                        std::vector<int32_t> prompt) {
  NewRequest request;
  request.request_id = id;
  request.prompt_token_ids = std::move(prompt);
  request.stop.max_tokens = 1;
  request.hold_kv_when_finished = true;
  if (prefill.scheduler.add_request(request) != AddResult::kAccepted) return std::nullopt;
  prefill.requests[id] = request;
  for (int step = 0; step < 8; ++step) {
    const StepPlan plan = prefill.scheduler.schedule();
    if (plan.empty()) break;
    for (const FinishedSequence& finished : complete(prefill, plan).finished) {
      if (finished.request_id == id) return finished;
    }
  }
  return std::nullopt;
}

// The remote source a decode server builds from a prefill server's held KV (every group's pages).
inline RemoteKvSource source_of(const HeldKv& held, std::string lease) {
  return RemoteKvSource{.engine_id = "prefill-0",
                        .host = "10.0.0.7",
                        .port = 8200,
                        .request_id = std::move(lease),
                        .block_ids = held.block_ids,
                        .sliding_block_ids = held.sliding_block_ids,
                        .num_tokens = held.num_tokens};
}

inline NewRequest remote_request(RequestId id, std::vector<int32_t> prompt, int32_t max_tokens,
                                 RemoteKvSource source, std::optional<int32_t> first_token_id) {
  NewRequest request;
  request.request_id = id;
  request.prompt_token_ids = std::move(prompt);
  request.stop.max_tokens = max_tokens;
  request.remote_kv = std::move(source);
  request.first_token_id = first_token_id;
  return request;
}

inline AddResult add_remote(SchedulerHarness& h, const NewRequest& request) {
  const AddResult result = h.scheduler.add_request(request);
  if (result == AddResult::kAccepted) h.requests[request.request_id] = request;
  return result;
}

}  // namespace troupe::scheduler::testing
