#include "actors/messages/engine_types.hpp"

namespace troupe::engine {

std::string_view to_string(RequestOrigin origin) {
  switch (origin) {
    case RequestOrigin::kHttp: return "http";
    case RequestOrigin::kWebSocket: return "ws";
    case RequestOrigin::kBatch: return "batch";
    case RequestOrigin::kCli: return "cli";
  }
  return "http";
}

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidRequest: return "invalid_request";
    case ErrorCode::kPromptTooLong: return "context_length_exceeded";
    case ErrorCode::kQueueFull: return "queue_full";
    case ErrorCode::kDraining: return "draining";
    case ErrorCode::kInternal: return "internal_error";
  }
  return "internal_error";
}

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

std::string_view to_string(RequestPhase phase) {
  switch (phase) {
    case RequestPhase::kWaiting: return "waiting";
    case RequestPhase::kPreempted: return "preempted";
    case RequestPhase::kPrefill: return "prefill";
    case RequestPhase::kDecode: return "decode";
    case RequestPhase::kFinishing: return "finishing";
  }
  return "waiting";
}

}  // namespace troupe::engine
