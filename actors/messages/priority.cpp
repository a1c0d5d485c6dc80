#include "actors/messages/priority.hpp"

namespace troupe {

std::string_view to_string(Priority priority) {
  switch (priority) {
    case Priority::kLow: return "low";
    case Priority::kNormal: return "normal";
    case Priority::kHigh: return "high";
    case Priority::kCritical: return "critical";
  }
  return "normal";
}

std::optional<Priority> parse_priority(std::string_view text) {
  if (text == "low") return Priority::kLow;
  if (text == "normal") return Priority::kNormal;
  if (text == "high") return Priority::kHigh;
  if (text == "critical") return Priority::kCritical;
  return std::nullopt;
}

}  // namespace troupe
