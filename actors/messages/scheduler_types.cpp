// Names of the scheduler's enums, for logs, the admin socket and the wire codecs.
#include "actors/messages/scheduler_types.hpp"

namespace troupe::scheduler {

std::string_view to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos: return "eos";
    case FinishReason::kStopToken: return "stop_token";
    case FinishReason::kStopString: return "stop_string";
    case FinishReason::kMaxTokens: return "max_tokens";
    case FinishReason::kMaxModelLen: return "max_model_len";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kGrammarEnd: return "grammar_end";
  }
  return "unknown";
}

std::string_view openai_finish_reason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
    case FinishReason::kStopToken:
    case FinishReason::kStopString:
    case FinishReason::kGrammarEnd: return "stop";
    case FinishReason::kMaxTokens:
    case FinishReason::kMaxModelLen: return "length";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "stop";
}

std::string_view to_string(AddResult result) {
  switch (result) {
    case AddResult::kAccepted: return "accepted";
    case AddResult::kQueueFull: return "queue_full";
    case AddResult::kClientQueueFull: return "client_queue_full";
    case AddResult::kEmptyPrompt: return "empty_prompt";
    case AddResult::kInvalidMaxTokens: return "invalid_max_tokens";
    case AddResult::kPromptTooLong: return "prompt_too_long";
    case AddResult::kNeverFits: return "never_fits";
    case AddResult::kDuplicateId: return "duplicate_id";
    case AddResult::kRetryLater: return "retry_later";
  }
  return "unknown";
}

std::string_view to_string(SlotPhase phase) {
  switch (phase) {
    case SlotPhase::kWaiting: return "waiting";
    case SlotPhase::kPreempted: return "preempted";
    case SlotPhase::kPrefill: return "prefill";
    case SlotPhase::kDecode: return "decode";
    case SlotPhase::kAwaitingTransfer: return "awaiting_transfer";
  }
  return "unknown";
}

}  // namespace troupe::scheduler
