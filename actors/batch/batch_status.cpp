#include "actors/batch/batch_status.hpp"

#include "model/enum_names.hpp"

namespace troupe::batch {
namespace {

constexpr EnumNames<BatchStatus, 8> kStatusNames{{{
    {BatchStatus::kValidating, "validating"},
    {BatchStatus::kFailed, "failed"},
    {BatchStatus::kInProgress, "in_progress"},
    {BatchStatus::kFinalizing, "finalizing"},
    {BatchStatus::kCompleted, "completed"},
    {BatchStatus::kExpired, "expired"},
    {BatchStatus::kCancelling, "cancelling"},
    {BatchStatus::kCancelled, "cancelled"},
}}};
static_assert(kStatusNames.dense());

}  // namespace

std::string_view to_string(BatchStatus status) { return kStatusNames.name(status); }

std::optional<BatchStatus> parse_batch_status(std::string_view text) { return kStatusNames.parse(text); }

bool is_terminal(BatchStatus status) {
  return status == BatchStatus::kFailed || status == BatchStatus::kCompleted ||
         status == BatchStatus::kExpired || status == BatchStatus::kCancelled;
}

}  // namespace troupe::batch
