// Messages the scheduler actor receives (from ingress). The admin's prefix-cache flush goes to
// the kv-cache actor (actors/kv_cache/kv_cache_messages.hpp).
//
// Thread-safety: plain values, moved through the scheduler mailbox.
#pragma once

#include <variant>
#include <vector>

#include "actors/messages/scheduler_types.hpp"

namespace troupe::scheduler {

// One client request: its n choices' sequences (ids request_id + i), admitted or refused
// together. AdmissionRefused names the first.
struct Admit {
  std::vector<NewRequest> sequences;
};

struct CancelSequence {
  RequestId request_id = 0;
};

// The detokenizer matched a stop string: end the sequence with kStopString.
struct FinishSequence {
  RequestId request_id = 0;
  FinishReason reason = FinishReason::kStopString;
};

// The kv-cache actor: a pull ordered by the policy (KvPullOrder) is over. ok false: it failed
// (peer gone, incompatible, timed out) and the prompt is computed here instead.
struct KvResident {
  RequestId request_id = 0;
  bool ok = false;
};

// The kv-cache actor: a decode server released a held sequence's KV, or its lease expired.
// Or ingress (forget_lease true): the request's client left before it got the answer that
// names the KV, so nobody can pull it; the kv-cache actor's lease is dropped too.
struct ReleaseHeldKv {
  RequestId request_id = 0;
  bool forget_lease = false;
};

using SchedulerMessage =
    std::variant<Admit, CancelSequence, FinishSequence, KvResident, ReleaseHeldKv>;

}  // namespace troupe::scheduler
