// Messages the scheduler actor receives (from ingress). The admin's prefix-cache flush goes to
// the kv-cache actor (actors/kv_cache/kv_cache_messages.hpp).
//
// Thread-safety: plain values, moved through the scheduler mailbox.
#pragma once

#include <variant>

#include "actors/scheduler/sequence.hpp"

namespace troupe::scheduler {

struct Admit {
  NewRequest request;
};

struct CancelSequence {
  RequestId request_id = 0;
};

// The detokenizer matched a stop string: end the sequence with kStopString.
struct FinishSequence {
  RequestId request_id = 0;
  FinishReason reason = FinishReason::kStopString;
};

using SchedulerMessage = std::variant<Admit, CancelSequence, FinishSequence>;

}  // namespace troupe::scheduler
