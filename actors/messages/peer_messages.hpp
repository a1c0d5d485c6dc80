// What the actors send to and get back from other troupe servers (disagg/peer_client.hpp is the
// interface that carries them): a prompt to prefill there, its reply, a KV-metadata reply. In the
// message layer because the replies come back as the ingress and kv-cache actors' messages.
//
// Thread-safety: plain values.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "actors/messages/disagg_types.hpp"
#include "actors/messages/priority.hpp"
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

}  // namespace troupe::disagg
