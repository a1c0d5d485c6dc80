// Disaggregated prefill/decode (issue 17): the values that cross processes. A prefill server
// computes a prompt's KV and its first token and holds the blocks under a lease; a decode server
// pulls those blocks over the KV transport (UCX) and continues the generation.
//
// The request/response fields follow vLLM's NixlConnector `kv_transfer_params` so that vLLM's
// proxy pattern and llm-d's routing sidecar drive troupe unchanged; troupe adds fields of its
// own (prefixed nothing, ignored by those proxies, passed back verbatim):
//
//   client ──► prefill  {"kv_transfer_params": {"do_remote_decode": true}, "max_tokens": 1}
//          ◄── prefill  {"kv_transfer_params": {"do_remote_prefill": true, "remote_engine_id",
//                        "remote_block_ids", "remote_request_id", "remote_host", "remote_port",
//                        "remote_num_tokens", "first_token_id"}}
//   client ──► decode   same prompt + those kv_transfer_params ──► decode pulls, continues
//
// Thread-safety: plain values.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/messages/kv_transfer_types.hpp"

namespace troupe::disagg {

// What a server does (config disagg.role). kCombined is a normal server; a prefill server
// serves do_remote_decode requests (and ordinary ones); a decode server with prefill peers
// sends long prompts to them.
enum class Role : uint8_t { kCombined, kPrefill, kDecode };
std::string_view to_string(Role role);
std::optional<Role> parse_role(std::string_view text);

// Where a peer's HTTP surface (and its /v1/kv/* routes) listens.
struct PeerAddress {
  std::string host;
  uint16_t port = 0;

  std::string to_string() const { return host + ":" + std::to_string(port); }
  friend bool operator==(const PeerAddress&, const PeerAddress&) = default;
};

// vLLM's kv_transfer_params (NixlConnector), both directions, plus troupe's additions.
struct KvTransferParams {
  bool do_remote_decode = false;   // to a prefill server: hold the KV for a decode server
  bool do_remote_prefill = false;  // to a decode server: the KV is on the remote server
  std::string remote_engine_id;
  std::vector<int32_t> remote_block_ids;
  std::string remote_request_id;
  std::string remote_host;
  int32_t remote_port = 0;
  // troupe: KV positions the remote blocks hold (the prompt's length on the prefill server),
  // and the token the prefill server sampled after them. Without first_token_id the decode
  // server recomputes the prompt's last position itself, as vLLM's decode side does.
  int32_t remote_num_tokens = 0;
  std::optional<int32_t> first_token_id;
  // troupe: a model with sliding-window KV groups (gpu/kv_groups.hpp) holds one table per group;
  // remote_block_ids is group 0's, these are groups 1.., each as long, -1 where the prefill
  // server already freed the page (before the next token's window). Empty without groups.
  std::vector<std::vector<int32_t>> remote_sliding_block_ids;
};

// How a backend lays out its paged KV memory, so that a peer can address one block of one
// layer's K or V by arithmetic: offset = layer * layer_stride + kv * kv_stride + block *
// block_bytes (kv 0 = K, 1 = V). A block's K (or V) of one layer is one contiguous run.
struct KvLayout {
  // Layers of KV memory. With KV groups these are the group's layer slots: a page (block id) of
  // any group holds one block in each slot (gpu/kv_groups.hpp).
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;  // tokens per block
  int32_t num_blocks = 0;
  std::string dtype = "f16";
  uint64_t block_bytes = 0;  // one block, one layer, K or V
  uint64_t kv_stride = 0;
  uint64_t layer_stride = 0;

  friend bool operator==(const KvLayout&, const KvLayout&) = default;
};

// What GET /v1/kv/metadata serves: enough for a peer to pull from this server's KV memory.
struct KvMetadata {
  std::string engine_id;  // unique per process start: a restarted peer is a new peer
  // The transport's own description of the registered KV memory (its binary fields travel as
  // base64 on the wire, flat beside engine_id).
  kv_transfer::LocalDescriptor descriptor;
  KvLayout layout;
  // Equal on two servers iff their KV is interchangeable: model file hash, KV dtype, layers,
  // KV heads, head dim, block size (hex of a SHA-256).
  std::string compatibility_hash;
};

// Decode side, kv-cache actor -> ingress: a prefill server cannot be used for a while (its
// handshake failed, or its KV is incompatible): send it no prompts until then.
struct PeerUnusable {
  PeerAddress peer;
  std::chrono::milliseconds for_how_long{0};
  std::string why;
};

}  // namespace troupe::disagg
