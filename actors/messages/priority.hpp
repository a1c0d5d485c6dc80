// Request priority, shared by the scheduler policy, the engine facade and the wire codecs.
//
// Thread-safety: pure functions; callable from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace troupe {

// Ordered: a larger value is served first and may preempt a smaller one.
enum class Priority : uint8_t { kLow = 0, kNormal = 1, kHigh = 2, kCritical = 3 };

inline constexpr int kNumPriorities = 4;

std::string_view to_string(Priority priority);

// "low" | "normal" | "high" | "critical"; nullopt for anything else.
std::optional<Priority> parse_priority(std::string_view text);

}  // namespace troupe
