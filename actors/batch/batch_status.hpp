// A durable batch's status (issue 40): OpenAI's names, both ways.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace troupe::batch {

// OpenAI's statuses: validating -> in_progress -> finalizing -> completed; failed (the input was
// not a valid batch, or storage failed); expired (the completion window passed); cancelling ->
// cancelled.
enum class BatchStatus : uint8_t {
  kValidating,
  kFailed,
  kInProgress,
  kFinalizing,
  kCompleted,
  kExpired,
  kCancelling,
  kCancelled,
};
std::string_view to_string(BatchStatus status);
std::optional<BatchStatus> parse_batch_status(std::string_view text);
// failed, completed, expired, cancelled: nothing more will happen to the batch.
bool is_terminal(BatchStatus status);

}  // namespace troupe::batch
