// KvTransport: moves KV-cache bytes from a peer engine's registered memory into ours.
//
// Transport-neutral: troupe's own TCP transport (tcp_transport.hpp, the default) and UCX
// (ucx_transport.hpp, for RDMA hosts) implement it, and NIXL (or another RDMA library) could sit
// behind the same calls. The model is one-sided "pull": the decode engine reads the prefill
// engine's KV blocks straight out of the prefill engine's arena into its own arena.
//
//   prefill engine (peer)                         decode engine (us)
//   ┌───────────────────────────┐   pull()       ┌───────────────────────────┐
//   │ registered region         │ ─────────────► │ registered region         │
//   │ base_address ... +bytes   │  segments:     │ base ... +bytes           │
//   │   [remote_offset, +bytes) │  remote→local  │   [local_offset, +bytes)  │
//   └───────────────────────────┘                └───────────────────────────┘
//
// Each engine registers ONE region (its KV arena) once; that region is both what peers read
// from and what our pulls write into. Everything a peer needs to read our region travels in a
// LocalDescriptor, which the control plane (JSON over HTTP) carries between engines.
//
// NOTE: a descriptor is trusted input. Transport libraries parse the address and key bytes
// without bounds checks (UCX's ucp_ep_create and ucp_ep_rkey_unpack are not even given their
// length), so descriptors must come from our own engines over the control plane, never from
// clients. A pull only checks that the fields are present and made by the same transport.
//
// Thread-safety: every KvTransport member may be called from any thread. Completion callbacks
// run on the transport's own thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "actors/messages/kv_transfer_types.hpp"

namespace troupe::kv_transfer {

// Thread-safety: every member may be called from any thread, concurrently. Destroying the
// transport must not race with other calls on it, and must not happen from inside a PullDone.
class KvTransport {
 public:
  // Runs exactly once per pull, on the transport's own thread, outside any transport-library
  // call. Must not block (it delays every other pull) and must not destroy the transport.
  using PullDone = std::function<void(Status)>;

  struct Stats {
    uint64_t pulls_ok = 0;
    uint64_t pulls_failed = 0;
    uint64_t bytes_pulled = 0;  // bytes of successful pulls
    uint64_t segments = 0;      // caller segments of successful pulls, before coalescing
    uint64_t gets_issued = 0;   // transport read operations issued, after coalescing
    uint64_t bytes_served = 0;  // bytes that peers read from us (sent, not known delivered)
    uint64_t serves_failed = 0;  // peers' read requests whose answer could not be sent (the
                                 // peer died or dropped its endpoint mid-read)
    int32_t peers = 0;          // peers with an endpoint right now
    int32_t in_flight = 0;      // pulls accepted whose done has not run yet
  };

  virtual ~KvTransport() = default;

  virtual std::string_view name() const = 0;

  // Immutable after construction; hand it to peers so they can pull from us.
  virtual const LocalDescriptor& local_descriptor() const = 0;

  // Reads `segments` of the peer's registered region into our registered region. `peer_key`
  // identifies the peer (its engine id); the first pull to a key connects with `peer`'s
  // descriptor, later pulls reuse the endpoint (a pull carrying a different descriptor for a
  // known key drops the old endpoint and reconnects: the peer restarted). Completes with an
  // error, never hangs, when the peer is unreachable, dies mid-pull, or the pull takes longer
  // than `timeout` (counted from this call). When `done` runs — with or without an error — no
  // operation of this pull is still writing into our memory, so the caller may free or reuse
  // those bytes right away.
  virtual void pull(const std::string& peer_key, const LocalDescriptor& peer,
                    std::vector<Segment> segments, std::chrono::milliseconds timeout,
                    PullDone done) = 0;

  // Drops the endpoint to a peer (it restarted or went away); its in-flight pulls fail with
  // kPeerFailed. The next pull to the key connects afresh. Unknown keys are ignored.
  virtual void forget_peer(const std::string& peer_key) = 0;

  virtual Stats stats() const = 0;
};

}  // namespace troupe::kv_transfer
