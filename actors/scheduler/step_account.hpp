// StepAccountant: books the step loop's wall time into engine::StepAccount (issue 42: where a
// served run's time goes). The scheduler actor tells it what each step computed and how long
// it took, and how long the loop slept; what is left of the wall time is the loop's own work.
//
// Thread-safety: a plain value; the scheduler actor's executor only.
#pragma once

#include <chrono>
#include <cstdint>

#include "actors/messages/engine_types.hpp"
#include "gpu/backend.hpp"

namespace troupe::scheduler {

class StepAccountant {
 public:
  using Clock = std::chrono::steady_clock;

  explicit StepAccountant(Clock::time_point started) : started_(started) {}

  // The loop slept `ms` on its mailbox with nothing to run.
  void add_idle(double ms) { account_.idle_ms += ms; }
  // A step that completed: its prompt tokens (chunks, drafts) and one-token decode rows, its
  // measured time (hand-off to completion) and the backend's phases inside it.
  void add_step(int64_t prompt_tokens, int64_t decode_rows, double step_ms,
                const gpu::StepTimings& timings);
  // A step given up (first-token interrupt) or failed after `ms`: no tokens to show for it.
  void add_interrupted(double ms) { account_.interrupted_ms += ms; }
  void add_failed(double ms) { account_.backend_other_ms += ms; }

  // The account at `now`: engine_ms is the wall time nothing else claims.
  engine::StepAccount at(Clock::time_point now) const;

 private:
  Clock::time_point started_;
  engine::StepAccount account_;
};

}  // namespace troupe::scheduler
