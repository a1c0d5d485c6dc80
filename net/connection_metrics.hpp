// Counters of the HTTP listener's connections, exposed on /metrics: how many are open, how many
// were turned away at http.max_connections, and how often accept() failed (EMFILE and the like,
// which the listener answers by backing off; see accept_backoff.hpp).
//
// Thread-safety: lock-free atomics; the listener and sessions update them from the io threads,
// /metrics reads them from any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace troupe::net {

struct ConnectionMetrics {
  std::atomic<int64_t> num_open{0};       // HTTP and WebSocket sessions
  std::atomic<uint64_t> num_accepted{0};  // connections accepted and served
  std::atomic<uint64_t> num_refused{0};   // accepted at the cap and answered 503 (or closed)
  std::atomic<uint64_t> num_accept_failures{0};
};

}  // namespace troupe::net
