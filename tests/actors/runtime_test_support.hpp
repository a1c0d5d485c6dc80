// What the actor runtime's tests (channel_test.cpp, actor_test.cpp) share: message counts that
// scale down under sanitizers, deadlines, and waiting for a condition another thread makes true.
//
// Thread-safety: test helpers; eventually() may poll state other threads write (atomics).
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

namespace troupe::actors::runtime::testing {

using namespace std::chrono_literals;

// Sanitizers slow everything 5-20x; the Release build keeps the full counts (>= 10^6).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr int64_t kScaleDown = 20;
#else
inline constexpr int64_t kScaleDown = 1;
#endif

inline std::chrono::steady_clock::time_point in(std::chrono::milliseconds delay) {
  return std::chrono::steady_clock::now() + delay;
}

// Spins (yielding) until `condition` holds or a generous timeout passes.
template <typename Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout = 20000ms) {
  const auto deadline = in(timeout);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace troupe::actors::runtime::testing
