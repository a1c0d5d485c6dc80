// How the actors reach other troupe servers' HTTP surfaces for disaggregated prefill/decode:
// ask a prefill server to compute a prompt and hold its KV, fetch its KV metadata (the
// handshake), and tell it a lease is done. The actors know only this interface; net/ implements
// it over Beast (net/peer_client.hpp), so actors/ never depends on net/.
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

#include "actors/common/priority.hpp"
#include "actors/disagg/disagg_types.hpp"
#include "model/sampling_params.hpp"

namespace troupe::disagg {

// A prompt to compute on a prefill server (POST /v1/completions with do_remote_decode and
// max_tokens 1; prompt as token ids so that both sides agree on the tokens).
struct PrefillCall {
  PeerAddress peer;
  std::vector<int32_t> prompt_token_ids;
  model::SamplingParams sampling;  // the first token is sampled there, with the request's knobs
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  Priority priority = Priority::kNormal;
  std::string client;  // the fair-share client, forwarded as the OpenAI `user`
  std::chrono::milliseconds timeout{30000};
};

struct PrefillReply {
  // Empty when the prefill server answered 200 with usable kv_transfer_params. Otherwise why
  // not (connection refused, timeout, HTTP 429 ...): the caller falls back to a local prefill.
  std::string error;
  int http_status = 0;  // 0: no HTTP answer at all
  KvTransferParams params;
};

using MetadataReply = std::variant<KvMetadata, std::string>;  // metadata, or why not

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
