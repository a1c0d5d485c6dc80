// How the actors reach other troupe servers' HTTP surfaces for disaggregated prefill/decode:
// ask a prefill server to compute a prompt and hold its KV, fetch its KV metadata (the
// handshake), and tell it a lease is done. The actors know only this interface; net/ implements
// it over Beast (net/http_peer_client.hpp), so actors/ never depends on net/.
//
// Thread-safety: every member may be called from any thread. Callbacks run exactly once, on the
// client's own thread, and must not block (post to an actor's mailbox).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "actors/messages/peer_messages.hpp"

namespace troupe::disagg {

class PeerClient {
 public:
  using CallId = uint64_t;

  virtual ~PeerClient() = default;

  virtual CallId prefill(PrefillCall call, std::function<void(PrefillReply)> done) = 0;
  // Abandons a prefill call: its connection closes, so the prefill server sees its client gone
  // and cancels (freeing what it held); `done` still runs once, with an error.
  virtual void cancel(CallId call_id) = 0;
  // GET /v1/kv/metadata.
  virtual void fetch_metadata(PeerAddress peer, std::chrono::milliseconds timeout,
                              std::function<void(MetadataReply)> done) = 0;
  // POST /v1/kv/release: best effort (the prefill side's lease expiry covers a lost release).
  virtual void release(PeerAddress peer, std::string remote_request_id) = 0;
};

}  // namespace troupe::disagg
