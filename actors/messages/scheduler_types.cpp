// Names of the scheduler's enums, for logs, the admin socket and the wire codecs.
#include "actors/messages/scheduler_types.hpp"

#include "model/enum_names.hpp"

namespace troupe::scheduler {

constexpr EnumNames<FinishReason, 8> kFinishReasonNames{{{
    {FinishReason::kEos, "eos"}, {FinishReason::kStopToken, "stop_token"},
    {FinishReason::kStopString, "stop_string"}, {FinishReason::kMaxTokens, "max_tokens"},
    {FinishReason::kMaxModelLen, "max_model_len"}, {FinishReason::kCancelled, "cancelled"},
    {FinishReason::kGrammarEnd, "grammar_end"}, {FinishReason::kPromptDone, "prompt_done"}}}};
static_assert(kFinishReasonNames.dense());

std::string_view to_string(FinishReason reason) { return kFinishReasonNames.name(reason); }

std::string_view openai_finish_reason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
    case FinishReason::kStopToken:
    case FinishReason::kStopString:
    case FinishReason::kGrammarEnd: return "stop";
    case FinishReason::kMaxTokens:
    case FinishReason::kMaxModelLen:
    // As vLLM answers echo with max_tokens 0: the length limit (zero tokens) was reached.
    case FinishReason::kPromptDone: return "length";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "stop";
}

constexpr EnumNames<AddResult, 9> kAddResultNames{{{
    {AddResult::kAccepted, "accepted"}, {AddResult::kQueueFull, "queue_full"},
    {AddResult::kClientQueueFull, "client_queue_full"},
    {AddResult::kEmptyPrompt, "empty_prompt"},
    {AddResult::kInvalidMaxTokens, "invalid_max_tokens"},
    {AddResult::kPromptTooLong, "prompt_too_long"}, {AddResult::kNeverFits, "never_fits"},
    {AddResult::kDuplicateId, "duplicate_id"}, {AddResult::kRetryLater, "retry_later"}}}};
static_assert(kAddResultNames.dense());

std::string_view to_string(AddResult result) { return kAddResultNames.name(result); }

constexpr EnumNames<SlotPhase, 5> kSlotPhaseNames{{{
    {SlotPhase::kWaiting, "waiting"}, {SlotPhase::kPreempted, "preempted"},
    {SlotPhase::kPrefill, "prefill"}, {SlotPhase::kDecode, "decode"},
    {SlotPhase::kAwaitingTransfer, "awaiting_transfer"}}}};
static_assert(kSlotPhaseNames.dense());

std::string_view to_string(SlotPhase phase) { return kSlotPhaseNames.name(phase); }

}  // namespace troupe::scheduler
