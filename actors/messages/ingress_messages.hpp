// Messages the ingress actor receives: from net (through the Engine facade), from its prompt
// workers and from the scheduler actor.
//
// Thread-safety: plain values, moved through the ingress mailbox.
#pragma once

#include <chrono>
#include <memory>
#include <variant>
#include <vector>

#include "actors/messages/engine_types.hpp"
#include "actors/messages/peer_messages.hpp"
#include "actors/messages/prompt_types.hpp"
#include "actors/messages/scheduler_types.hpp"

namespace troupe::ingress {

using Clock = std::chrono::steady_clock;

struct Submit {
  engine::RequestId request_id = 0;
  engine::GenerateRequest request;
  std::shared_ptr<engine::RequestSink> sink;
  Clock::time_point submitted_at;
};

struct CancelRequest {
  engine::RequestId request_id = 0;
};

// A prompt worker built (or refused) a submitted request's prompt: the request goes on to the
// scheduler from here. `request` comes back as the worker took it.
struct PromptBuilt {
  engine::RequestId request_id = 0;
  std::variant<BuiltPrompt, engine::RequestError> built;
  engine::GenerateRequest request;
};

// Cancel every live request (drain deadline passed, or shutdown).
struct CancelAll {};

// One step's outcome: tokens sampled, sequences finished (EOS, length, cancel), and which
// requests the step computed (to stamp their first-scheduled time).
struct StepEvents {
  scheduler::StepUpdate update;
  std::vector<engine::RequestId> scheduled;
  Clock::time_point step_started_at;
  Clock::time_point step_done_at;
};

// The scheduler ended requests outside a step (cancel, refusal, backend failure).
struct SequencesEnded {
  std::vector<scheduler::FinishedSequence> finished;
};

struct AdmissionRefused {
  engine::RequestId request_id = 0;
  scheduler::AddResult result = scheduler::AddResult::kQueueFull;
};

// The backend failed a step: these requests end with an internal error.
struct StepFailed {
  std::vector<engine::RequestId> request_ids;
  std::string message;
};

// Decode role with prefill peers: a prefill server answered (or did not) for this request.
struct RemotePrefillDone {
  engine::RequestId request_id = 0;
  disagg::PrefillReply reply;
};

using IngressMessage =
    std::variant<Submit, PromptBuilt, CancelRequest, CancelAll, StepEvents, SequencesEnded,
                 AdmissionRefused, StepFailed, RemotePrefillDone, disagg::PeerUnusable>;

}  // namespace troupe::ingress
