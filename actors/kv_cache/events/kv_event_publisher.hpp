// KvEventPublisher: sends KV-cache events to routers over ZeroMQ the way vLLM's
// ZmqEventPublisher does, without ever holding up the engine (issue 20).
//
//   engine thread                          publisher thread (owns every socket but `wake_`)
//   publish(batch) ─► bounded SPSC queue ─► encode (kv_event_codec) ─► PUB  [topic, seq, payload]
//        └─ full: drop, count                                      └─► replay ring (buffer_steps)
//   wake_ (inproc PUSH, never blocks) ─────► wake (PULL)     ROUTER ◄─ [id, "", start seq]
//                                                                   ─► [id, "", seq, payload]...
//                                                                      [id, "", -1, ""]
//
// Why a thread and not an actor on the engine's executor: encoding and socket I/O are work the
// step loop must not pay for, and ZeroMQ sockets are used by one thread only. Why nothing
// blocks: publish() only pushes a pointer into a lock-free queue (a full queue drops the batch
// and counts its events: troupe:kv_events_dropped_total); the PUB socket drops messages for a
// subscriber past its high-water mark instead of waiting (ZeroMQ's PUB semantics), and the
// ROUTER drops replies to a client that does not read.
//
// Sequence numbers count batches from 0, 8-byte big-endian, as vLLM's; a subscriber that sees a
// gap asks the replay socket for what it missed (the last buffer_steps batches are kept).
//
// Thread-safety: construct and destroy on one thread; publish() from one thread at a time (the
// kv-cache actor's executor); stats() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "actors/kv_cache/events/kv_events_config.hpp"
#include "actors/kv_cache/kv_events.hpp"

namespace troupe::kv_cache {

class KvEventPublisher final : public KvEventSink {
 public:
  // Opens the sockets (std::runtime_error naming the endpoint when one cannot be bound or
  // connected) and starts the thread. `medium`: "GPU" or "CPU" (kv_event_codec.hpp).
  KvEventPublisher(const KvEventsConfig& config, std::string medium);
  // Sends what is queued, then stops.
  ~KvEventPublisher() override;
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  bool publish(KvEventBatch batch) override;
  KvEventStats stats() const override;

 private:
  struct Impl;
  void run();

  std::unique_ptr<Impl> impl_;
  std::atomic<uint64_t> published_batches_{0};
  std::atomic<uint64_t> published_events_{0};
  std::atomic<uint64_t> dropped_events_{0};
  std::atomic<uint64_t> replay_requests_{0};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// vLLM's rule: bind when the endpoint has a wildcard or is local (ipc://, inproc://), else
// connect.
bool kv_event_endpoint_binds(std::string_view endpoint);

}  // namespace troupe::kv_cache
