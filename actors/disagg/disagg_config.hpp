// The `disagg` config section: this server's part in disaggregated prefill/decode.
//
// Thread-safety: plain values.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/messages/disagg_types.hpp"

namespace troupe::disagg {

// What moves KV bytes between servers (actors/kv_cache/transfer/). Both ends must use the same:
// the handshake refuses a peer whose descriptor another transport made.
enum class KvTransportKind : uint8_t {
  kTcp,  // troupe's own sockets (tcp_transport.hpp): a dead peer is a socket error, never fatal
  kUcx,  // UCX (ucx_transport.hpp), for RDMA hosts; disagg.ucx_tls picks its transports
};

struct DisaggConfig {
  Role role = Role::kCombined;
  // Decode role: prefill servers to send long prompts to (least in-flight calls first, then
  // round robin). Empty: this decode server serves only requests that bring kv_transfer_params.
  std::vector<PeerAddress> prefill_peers;
  // Shorter prompts are prefilled here: the HTTP round trip and the pull cost more than
  // computing them (256 tokens take ~0.25 s on two CPU cores, a remote prefill ~ the same plus
  // the hop).
  int32_t min_remote_prefill_tokens = 256;
  // Prefill side: how long a finished prefill's blocks wait for a decode server's pull.
  std::chrono::milliseconds kv_lease{30000};
  // Decode side: a prefill call or a pull that takes longer falls back to a local prefill.
  std::chrono::milliseconds prefill_timeout{60000};
  std::chrono::milliseconds pull_timeout{10000};
  // What kv_transfer_params name as remote_host/remote_port (this server's HTTP address as
  // peers reach it). Empty host: the listen address, or 127.0.0.1 when listening on all.
  std::string advertise_host;
  uint16_t advertise_port = 0;
  KvTransportKind kv_transport = KvTransportKind::kTcp;
  // The tcp transport listens for peers' KV reads on this port (0: one the kernel picks) of the
  // HTTP listen host (kv_listen_host, set from http.host), and tells peers advertise_host.
  uint16_t kv_port = 0;
  std::string kv_listen_host = "127.0.0.1";
  // Sent as `Authorization: Bearer` to prefill servers that require an API key.
  std::string peer_api_key;
};

}  // namespace troupe::disagg
