#include "actors/messages/engine_types.hpp"

#include "model/enum_names.hpp"

namespace troupe::engine {

constexpr EnumNames<RequestOrigin, 4> kRequestOriginNames{{{
    {RequestOrigin::kHttp, "http"}, {RequestOrigin::kWebSocket, "ws"},
    {RequestOrigin::kBatch, "batch"}, {RequestOrigin::kCli, "cli"}}}, "http"};
static_assert(kRequestOriginNames.dense());

std::string_view to_string(RequestOrigin origin) { return kRequestOriginNames.name(origin); }

constexpr EnumNames<RequestKind, 3> kRequestKindNames{{{
    {RequestKind::kGenerate, "generate"}, {RequestKind::kEmbedding, "embedding"},
    {RequestKind::kScore, "score"}}}, "generate"};
static_assert(kRequestKindNames.dense());

std::string_view to_string(RequestKind kind) { return kRequestKindNames.name(kind); }

constexpr EnumNames<ErrorCode, 5> kErrorCodeNames{{{
    {ErrorCode::kInvalidRequest, "invalid_request"},
    {ErrorCode::kPromptTooLong, "context_length_exceeded"},
    {ErrorCode::kQueueFull, "queue_full"}, {ErrorCode::kDraining, "draining"},
    {ErrorCode::kInternal, "internal_error"}}}, "internal_error"};
static_assert(kErrorCodeNames.dense());

std::string_view to_string(ErrorCode code) { return kErrorCodeNames.name(code); }

int http_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidRequest:
    case ErrorCode::kPromptTooLong: return 400;
    case ErrorCode::kQueueFull: return 429;
    case ErrorCode::kDraining: return 503;
    case ErrorCode::kInternal: return 500;
  }
  return 500;
}

constexpr EnumNames<RequestPhase, 5> kRequestPhaseNames{{{
    {RequestPhase::kWaiting, "waiting"}, {RequestPhase::kPreempted, "preempted"},
    {RequestPhase::kPrefill, "prefill"}, {RequestPhase::kDecode, "decode"},
    {RequestPhase::kFinishing, "finishing"}}}, "waiting"};
static_assert(kRequestPhaseNames.dense());

std::string_view to_string(RequestPhase phase) { return kRequestPhaseNames.name(phase); }

}  // namespace troupe::engine
