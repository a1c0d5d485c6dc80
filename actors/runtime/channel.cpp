// Non-template parts of the channel.
#include "actors/runtime/channel.hpp"

#include "model/enum_names.hpp"

namespace troupe::actors::runtime {

constexpr EnumNames<SendStatus, 3> kSendStatusNames{{{
    {SendStatus::kAccepted, "accepted"}, {SendStatus::kFull, "full"},
    {SendStatus::kClosed, "closed"}}}, "?"};
static_assert(kSendStatusNames.dense());

std::string_view to_string(SendStatus status) { return kSendStatusNames.name(status); }

}  // namespace troupe::actors::runtime
