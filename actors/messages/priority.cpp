#include "actors/messages/priority.hpp"

#include "model/enum_names.hpp"

namespace troupe {

constexpr EnumNames<Priority, 4> kPriorityNames{{{
    {Priority::kLow, "low"}, {Priority::kNormal, "normal"}, {Priority::kHigh, "high"},
    {Priority::kCritical, "critical"}}}, "normal"};
static_assert(kPriorityNames.dense());

std::string_view to_string(Priority priority) { return kPriorityNames.name(priority); }

std::optional<Priority> parse_priority(std::string_view text) { return kPriorityNames.parse(text); }

}  // namespace troupe
