// IngressActor, disaggregated prefill/decode: honouring a request's kv_transfer_params, and (decode
// role with prefill peers) sending long prompts to a prefill server before the scheduler sees
// them. The prefill server's answer comes back as RemotePrefillDone; failures fall back to a
// local prefill. See actors/messages/disagg_types.hpp for the contract.
#include <spdlog/spdlog.h>

#include "actors/ingress/ingress_actor.hpp"

namespace troupe::ingress {

using actors::runtime::SendStatus;
using engine::ErrorCode;
using engine::RequestError;

namespace {

scheduler::RemoteKvSource remote_source_of(const disagg::KvTransferParams& params,
                                           size_t num_prompt_tokens) {
  scheduler::RemoteKvSource source;
  source.engine_id = params.remote_engine_id;
  source.host = params.remote_host;
  source.port = params.remote_port;
  source.request_id = params.remote_request_id;
  source.block_ids = params.remote_block_ids;
  source.sliding_block_ids = params.remote_sliding_block_ids;
  // vLLM's prefill servers do not say how many positions the blocks hold: the prompt's.
  source.num_tokens = params.remote_num_tokens > 0 ? params.remote_num_tokens
                                                   : static_cast<int32_t>(num_prompt_tokens);
  return source;
}

// Requests a prefill server cannot start: its answer is the KV plus one plainly sampled token
// (no mask, no logprobs, one choice).
bool first_token_must_be_sampled_here(const engine::GenerateRequest& request) {
  return request.kv_transfer || request.n > 1 ||
         // Prompt outputs are computed where the prompt is: here.
         request.embedding || request.prompt_logprobs >= 0 || request.prompt_only ||
         // A constrained request (a grammar, or tool calls under a structural tag): its first
         // token must be sampled under the mask.
         request.structured_output || request.parses_tool_calls() ||
         // The prefill server's token carries no logprobs.
         request.sampling.logprobs || request.sampling.top_logprobs > 0 ||
         // No wire field carries penalty_last_n: the first token would be sampled differently.
         request.sampling.penalty_last_n != model::SamplingParams{}.penalty_last_n;
}

}  // namespace

std::optional<RequestError> IngressActor::apply_kv_transfer(scheduler::NewRequest& admit,
                                                            const engine::GenerateRequest& request) const {
  if (!request.kv_transfer) return std::nullopt;
  const disagg::KvTransferParams& params = *request.kv_transfer;
  if ((params.do_remote_decode || params.do_remote_prefill) && request.n > 1) {
    return RequestError{ErrorCode::kInvalidRequest,
                        "kv_transfer_params: a remote prefill or decode serves one choice (n = 1)",
                        "kv_transfer_params"};
  }
  if (params.do_remote_decode && params.do_remote_prefill) {
    return RequestError{ErrorCode::kInvalidRequest,
                        "kv_transfer_params: do_remote_decode and do_remote_prefill exclude each other",
                        "kv_transfer_params"};
  }
  if ((params.do_remote_decode || params.do_remote_prefill) && !disagg_.moves_kv) {
    return RequestError{ErrorCode::kInvalidRequest,
                        "kv_transfer_params: this server moves no KV (start it with --role prefill "
                        "or --role decode)",
                        "kv_transfer_params"};
  }
  if (params.do_remote_decode) {
    admit.hold_kv_when_finished = true;
    return std::nullopt;
  }
  if (!params.do_remote_prefill) return std::nullopt;
  if (params.remote_engine_id.empty() || params.remote_host.empty() || params.remote_port <= 0 ||
      params.remote_port > 65535 || params.remote_request_id.empty()) {
    return RequestError{ErrorCode::kInvalidRequest,
                        "kv_transfer_params: do_remote_prefill needs remote_engine_id, "
                        "remote_request_id, remote_host and remote_port",
                        "kv_transfer_params"};
  }
  admit.remote_kv = remote_source_of(params, admit.prompt_token_ids.size());
  // The prefill server's token carries no logprobs: a request that wants them samples its
  // first token here (the prompt's last position is recomputed).
  if (!request.sampling.logprobs && request.sampling.top_logprobs == 0) {
    admit.first_token_id = params.first_token_id;
  }
  return std::nullopt;
}

bool IngressActor::start_remote_prefill(LiveRequest& live, scheduler::NewRequest& admit,
                                        const engine::GenerateRequest& request) {
  const disagg::DisaggConfig& config = disagg_.config;
  if (config.role != disagg::Role::kDecode || config.prefill_peers.empty() || !disagg_.peers ||
      first_token_must_be_sampled_here(request) ||
      static_cast<int32_t>(admit.prompt_token_ids.size()) < config.min_remote_prefill_tokens) {
    return false;
  }
  // Least in-flight calls first; among equals, round robin. Peers paused after a failure are
  // skipped; with none left the prompt is computed here.
  const size_t num_peers = config.prefill_peers.size();
  prefill_calls_per_peer_.resize(num_peers, 0);
  peer_unusable_until_.resize(num_peers, Clock::time_point{});
  const Clock::time_point now = Clock::now();
  std::optional<size_t> best;
  for (size_t k = 0; k < num_peers; ++k) {
    const size_t i = (next_prefill_peer_ + k) % num_peers;
    if (peer_unusable_until_[i] > now) continue;
    if (!best || prefill_calls_per_peer_[i] < prefill_calls_per_peer_[*best]) best = i;
  }
  if (!best) {
    ++num_remote_prefill_fallbacks_;
    return false;
  }
  const size_t chosen = *best;
  next_prefill_peer_ = chosen + 1;
  ++prefill_calls_per_peer_[chosen];
  disagg::PrefillCall call;
  call.peer = config.prefill_peers[chosen];
  call.prompt_token_ids = admit.prompt_token_ids;
  call.sampling = admit.sampling;
  call.stop_token_ids = admit.stop.stop_token_ids;
  call.ignore_eos = admit.stop.ignore_eos;
  call.priority = admit.priority;
  call.client = admit.client;
  call.timeout = config.prefill_timeout;
  live.building = true;
  live.prefill_peer = static_cast<int32_t>(chosen);
  live.awaiting_remote_prefill = std::move(admit);
  std::weak_ptr<Actor<IngressMessage>> self = weak_from_this();
  const engine::RequestId request_id = live.request_id;
  ++num_remote_prefills_;
  live.prefill_call_id = disagg_.peers->prefill(std::move(call), [self, request_id](disagg::PrefillReply reply) {
    actors::runtime::deliver(self.lock(), IngressMessage{RemotePrefillDone{request_id, std::move(reply)}});
  });
  return true;
}

void IngressActor::on_remote_prefill_done(RemotePrefillDone& done) {
  auto it = live_.find(done.request_id);
  if (it == live_.end()) return;
  LiveRequest& live = it->second;
  if (live.prefill_peer >= 0 && static_cast<size_t>(live.prefill_peer) < prefill_calls_per_peer_.size()) {
    --prefill_calls_per_peer_[static_cast<size_t>(live.prefill_peer)];
  }
  live.building = false;
  scheduler::NewRequest admit = std::move(*live.awaiting_remote_prefill);
  live.awaiting_remote_prefill.reset();
  const disagg::PrefillReply& reply = done.reply;
  if (live.cancelled_building) {
    if (reply.error.empty()) {
      disagg_.peers->release(disagg::PeerAddress{reply.params.remote_host,
                                                 static_cast<uint16_t>(reply.params.remote_port)},
                             reply.params.remote_request_id);
    }
    end_before_start(live, std::nullopt);
    return;
  }
  if (!reply.error.empty()) {
    // Prefill server down, slow or refusing: this server computes the prompt itself. One that
    // did not answer at all gets no prompts for a second (it may be restarting).
    ++num_remote_prefill_fallbacks_;
    if (reply.http_status == 0 && live.prefill_peer >= 0) {
      peer_unusable_until_.resize(disagg_.config.prefill_peers.size(), Clock::time_point{});
      peer_unusable_until_[static_cast<size_t>(live.prefill_peer)] = Clock::now() + std::chrono::seconds(1);
    }
    spdlog::warn("request {}: remote prefill failed ({}); prefilling locally", live.request_id, reply.error);
    send_admission(live, std::move(admit));
    return;
  }
  admit.remote_kv = remote_source_of(reply.params, admit.prompt_token_ids.size());
  admit.first_token_id = reply.params.first_token_id;
  send_admission(live, std::move(admit));
}

void IngressActor::on_peer_unusable(const disagg::PeerUnusable& unusable) {
  const std::vector<disagg::PeerAddress>& peers = disagg_.config.prefill_peers;
  peer_unusable_until_.resize(peers.size(), Clock::time_point{});
  for (size_t i = 0; i < peers.size(); ++i) {
    if (!(peers[i] == unusable.peer)) continue;
    peer_unusable_until_[i] = Clock::now() + unusable.for_how_long;
    spdlog::warn("prefill server {} gets no prompts for {} ms: {}", unusable.peer.to_string(),
                 unusable.for_how_long.count(), unusable.why);
  }
}

}  // namespace troupe::ingress
