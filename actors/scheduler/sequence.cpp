// Names of a sequence's states, for logs and the slots view.
#include "actors/scheduler/sequence.hpp"

namespace troupe::scheduler {

std::string_view to_string(SequenceState state) {
  switch (state) {
    case SequenceState::kWaiting: return "waiting";
    case SequenceState::kRunning: return "running";
    case SequenceState::kPrefillDone: return "prefill_done";
    case SequenceState::kAwaitingKv: return "awaiting_kv";
  }
  return "unknown";
}

}  // namespace troupe::scheduler
