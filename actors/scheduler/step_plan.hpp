// StepPlan: what Scheduler::schedule() decides one step computes, and what the scheduler actor
// needs to know about it afterwards (the policy's output, not a message between actors).
//
// Thread-safety: a plain value of the scheduler actor's executor.
#pragma once

#include <cstdint>
#include <vector>

#include "actors/messages/scheduler_types.hpp"
#include "actors/scheduler/step_cost_model.hpp"
#include "gpu/step.hpp"

namespace troupe::scheduler {

// What one step computes, and what the scheduler needs to know about it afterwards.
struct StepPlan {
  gpu::StepBatch batch;            // batch.seqs[i].seq_id is the RequestId
  int32_t num_prefill_tokens = 0;  // tokens of spans longer than one, or that do not sample
  int32_t num_decode_tokens = 0;   // one-token spans that sample (steady-state decode)
  // Sequences preempted while planning this step (already back in the waiting queue).
  std::vector<RequestId> preempted;
  // The step's shape, and its time as the StepCostModel in force predicted it (0 when the
  // model was not usable yet). time_budgeted: prefill chunks were cut to scheduler.max_step_ms.
  StepShape shape;
  double predicted_ms = 0;
  bool time_budgeted = false;
  // The step may be given up for a newcomer's first token (Scheduler::interrupt_due()).
  bool interruptible = false;

  bool empty() const { return batch.seqs.empty(); }
};

}  // namespace troupe::scheduler
