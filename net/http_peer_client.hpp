// disagg::PeerClient over HTTP/1.1 (Beast): one short connection per call (Connection: close),
// all of them on one io_context run by the client's own thread. A prefill call's connection
// stays open while the prefill server computes, so closing it (cancel) is how the prefill
// server learns its client is gone.
//
// Shutdown: the destructor closes every connection and waits for the thread; each pending
// callback then runs once with the error "shutting down".
// NOTE: a host name (not a numeric address) is resolved by the system resolver, which a close
// cannot interrupt: a lookup that hangs delays the destructor until it returns.
//
// Thread-safety: every member may be called from any thread, except that the destructor must
// not run on the client's own thread (inside one of its callbacks). Callbacks run exactly once,
// on the client's thread, and must not block.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "actors/disagg/peer_client.hpp"

namespace troupe::net {

struct PeerClientConfig {
  std::string api_key;  // sent as `Authorization: Bearer <api_key>` when not empty
  // Resolving and connecting; a call's own timeout (PrefillCall::timeout, fetch_metadata's
  // argument) bounds the whole exchange, connecting included.
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds release_timeout{5000};  // the whole of a /v1/kv/release exchange
  uint64_t max_response_bytes = 1u << 20;           // a larger answer body is an error
};

class HttpPeerClient final : public disagg::PeerClient {
 public:
  // Starts the client's thread.
  explicit HttpPeerClient(PeerClientConfig config);
  ~HttpPeerClient() override;

  HttpPeerClient(const HttpPeerClient&) = delete;
  HttpPeerClient& operator=(const HttpPeerClient&) = delete;

  // POST /v1/completions with prefill_request_json(call). HTTP 200 with usable
  // kv_transfer_params: a reply with `params`; anything else: a reply with `error` (and the
  // HTTP status, when there was an answer).
  CallId prefill(disagg::PrefillCall call, std::function<void(disagg::PrefillReply)> done) override;
  // Closes the call's connection; its callback gets the error "cancelled" (unless it already
  // ran). An unknown or finished id is ignored.
  void cancel(CallId call_id) override;
  void fetch_metadata(disagg::PeerAddress peer, std::chrono::milliseconds timeout,
                      std::function<void(disagg::MetadataReply)> done) override;
  // Fire and forget: a failure is logged at debug level.
  void release(disagg::PeerAddress peer, std::string remote_request_id) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::net
