// The JSON of disaggregated prefill/decode (issue 17): vLLM's `kv_transfer_params` in both
// directions, the KV metadata a server serves on GET /v1/kv/metadata, and the /v1/completions
// body a decode server sends to a prefill server. The shapes are in
// actors/messages/disagg_types.hpp.
//
// Every parser treats an absent field and an explicit JSON null alike (vLLM's proxies send nulls
// for unset params), ignores unknown keys (other connectors' fields, such as "tp_size"), and
// names the field in its error ("kv_transfer_params.remote_port must be an integer").
//
// Thread-safety: pure functions (a thread_local simdjson parser inside).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "actors/disagg/peer_client.hpp"
#include "actors/messages/disagg_types.hpp"
#include "net/json_writer.hpp"

namespace simdjson::dom {
class element;
}  // namespace simdjson::dom

namespace troupe::net {

// A decoded value, or why the JSON does not hold one.
template <class T>
using DisaggParsed = std::variant<T, std::string>;

// `kv_transfer_params` as a request carries it (the element is the object itself).
DisaggParsed<disagg::KvTransferParams> parse_kv_transfer_params(simdjson::dom::element params);
// The same from the object's JSON text.
DisaggParsed<disagg::KvTransferParams> parse_kv_transfer_params_json(std::string_view json);

// Writes the response's `kv_transfer_params` object as the next value of `out` (the caller
// writes the key): every field of `params` (first_token_id null when absent) plus "tp_size": 1,
// which vLLM's proxies read.
void write_kv_transfer_params(JsonWriter& out, const disagg::KvTransferParams& params);

// GET /v1/kv/metadata's body. worker_address and rkey travel as base64; base_address and
// region_bytes as JSON integers. The parser checks every field, and that the layout's last
// block lies inside the region (a peer reads memory at those addresses).
std::string kv_metadata_json(const disagg::KvMetadata& metadata);
DisaggParsed<disagg::KvMetadata> parse_kv_metadata(std::string_view body);

// The POST /v1/completions body that asks a prefill server to compute a prompt and hold its KV:
// the prompt as token ids, max_tokens 1, stream false, kv_transfer_params {do_remote_decode:
// true}, and the sampling knobs in the spelling troupe's own request parser accepts
// (net/openai_request.cpp), each omitted at its default.
// NOTE: min_tokens is sent as at most 1: the parser refuses min_tokens > max_tokens, and for
// the one token sampled there, any min_tokens >= 1 masks the same end ids.
// NOTE: sampling.penalty_last_n has no wire field; the prefill server uses its own default.
std::string prefill_request_json(const disagg::PrefillCall& call);

// The top-level `kv_transfer_params` of a prefill server's completion response: it must say
// do_remote_prefill true and carry a remote_engine_id, a remote_request_id and a
// remote_block_ids array.
DisaggParsed<disagg::KvTransferParams> parse_prefill_response(std::string_view body);

// Standard base64 (RFC 4648 §4, with padding). decode: nullopt for anything not canonical.
std::string base64_encode(std::string_view bytes);
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace troupe::net
