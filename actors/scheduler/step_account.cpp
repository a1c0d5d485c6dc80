// StepAccountant (see step_account.hpp).
#include "actors/scheduler/step_account.hpp"

#include <algorithm>

namespace troupe::scheduler {

void StepAccountant::add_step(int64_t prompt_tokens, int64_t decode_rows, double step_ms,
                              const gpu::StepTimings& timings) {
  engine::StepAccount& a = account_;
  if (decode_rows > 0 && prompt_tokens > 0) {
    ++a.mixed_steps;
  } else if (decode_rows > 0) {
    ++a.decode_only_steps;
  } else {
    ++a.prompt_only_steps;
  }
  a.decode_rows += static_cast<uint64_t>(std::max<int64_t>(0, decode_rows));
  a.prompt_tokens += static_cast<uint64_t>(std::max<int64_t>(0, prompt_tokens));
  // The phases lie inside the step's time; should the clocks disagree by a hair, they shrink
  // to fit rather than make the remainder negative.
  const double phases =
      timings.layers_ms + timings.logits_ms + timings.sampling_ms + timings.prompt_outputs_ms;
  const double fit = phases > step_ms && phases > 0 ? step_ms / phases : 1.0;
  const int64_t tokens = prompt_tokens + decode_rows;
  const double decode_share =
      tokens > 0 ? static_cast<double>(decode_rows) / static_cast<double>(tokens) : 0.0;
  a.decode_layers_ms += timings.layers_ms * fit * decode_share;
  a.prompt_layers_ms += timings.layers_ms * fit * (1.0 - decode_share);
  a.logits_ms += timings.logits_ms * fit;
  a.sampling_ms += timings.sampling_ms * fit;
  a.prompt_outputs_ms += timings.prompt_outputs_ms * fit;
  a.backend_other_ms += step_ms - phases * fit;
}

engine::StepAccount StepAccountant::at(Clock::time_point now) const {
  engine::StepAccount a = account_;
  a.wall_ms = std::chrono::duration<double, std::milli>(now - started_).count();
  const double claimed = a.idle_ms + a.decode_layers_ms + a.prompt_layers_ms + a.logits_ms +
                         a.sampling_ms + a.prompt_outputs_ms + a.backend_other_ms +
                         a.interrupted_ms;
  a.engine_ms = std::max(0.0, a.wall_ms - claimed);
  return a;
}

}  // namespace troupe::scheduler
