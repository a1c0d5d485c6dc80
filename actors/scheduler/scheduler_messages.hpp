// Messages the scheduler actor receives (from ingress and the Engine facade).
//
// Thread-safety: plain values, moved through the scheduler mailbox.
#pragma once

#include <future>
#include <memory>
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

// Admin: drop every unreferenced cached prefix block; the count goes back through `reply`.
struct FlushPrefixCache {
  std::shared_ptr<std::promise<int64_t>> reply;
};

using SchedulerMessage = std::variant<Admit, CancelSequence, FinishSequence, FlushPrefixCache>;

}  // namespace troupe::scheduler
