// Fuzzes the disaggregated prefill/decode codec (net/disagg_codec.*): the bytes other servers
// and clients send a troupe server in a P/D setup. Input: one selector byte (its value mod 4
// picks the parser), then the text:
//   0  base64_decode (a peer's worker_address / rkey)
//   1  parse_kv_transfer_params_json (a request's kv_transfer_params, vLLM's proxies' nulls)
//   2  parse_kv_metadata (GET /v1/kv/metadata from a peer)
//   3  parse_prefill_response (a prefill server's /v1/completions answer)
// Properties beyond "no crash, no UB, no leak":
//   - base64: decode accepts only canonical text, so encode(decode(x)) == x; decode(encode(x))
//     == x for any bytes x;
//   - an error is a non-empty message;
//   - accepted params are in range (block ids, port, counts, first token >= 0; a sliding
//     group's block ids >= -1, -1 for a freed page), and written
//     back (write_kv_transfer_params, valid JSON) they parse to an equal struct, alone and
//     inside a prefill response;
//   - an accepted prefill response says do_remote_prefill with an engine and a request id;
//   - accepted metadata has every required field, a layout whose last block lies inside the
//     region (re-checked here in 128-bit arithmetic), and kv_metadata_json of it (valid JSON)
//     parses to an equal struct.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "net/disagg_codec.hpp"
#include "net/json_writer.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace troupe;

namespace {

using disagg::KvMetadata;
using disagg::KvTransferParams;

// The accepted value, or nullptr for a refused input (whose error must be a message).
template <class T>
const T* accepted(const net::DisaggParsed<T>& parsed, const char* what) {
  if (const auto* error = std::get_if<std::string>(&parsed)) {
    TROUPE_FUZZ_CHECK(!error->empty(), "%s: an empty error message", what);
    return nullptr;
  }
  return &std::get<T>(parsed);
}

bool same_params(const KvTransferParams& a, const KvTransferParams& b) {
  return a.do_remote_decode == b.do_remote_decode && a.do_remote_prefill == b.do_remote_prefill &&
         a.remote_engine_id == b.remote_engine_id && a.remote_block_ids == b.remote_block_ids &&
         a.remote_request_id == b.remote_request_id && a.remote_host == b.remote_host &&
         a.remote_port == b.remote_port && a.remote_num_tokens == b.remote_num_tokens &&
         a.first_token_id == b.first_token_id &&
         a.remote_sliding_block_ids == b.remote_sliding_block_ids;
}

bool same_metadata(const KvMetadata& a, const KvMetadata& b) {
  return a.engine_id == b.engine_id && a.descriptor == b.descriptor && a.layout == b.layout &&
         a.compatibility_hash == b.compatibility_hash;
}

void check_base64(std::string_view text) {
  if (const auto bytes = net::base64_decode(text)) {
    TROUPE_FUZZ_CHECK(net::base64_encode(*bytes) == text, "accepted non-canonical base64 \"%.*s\"",
                      static_cast<int>(text.size()), text.data());
  }
  const std::string encoded = net::base64_encode(text);
  TROUPE_FUZZ_CHECK(encoded.size() == (text.size() + 2) / 3 * 4, "encoded length %zu for %zu",
                    encoded.size(), text.size());
  const auto decoded = net::base64_decode(encoded);
  TROUPE_FUZZ_CHECK(decoded && *decoded == text, "decode(encode(x)) != x for %zu bytes",
                    text.size());
}

void check_params_in_range(const KvTransferParams& p) {
  TROUPE_FUZZ_CHECK(p.remote_port >= 0 && p.remote_port <= 65535, "remote_port %d", p.remote_port);
  TROUPE_FUZZ_CHECK(p.remote_num_tokens >= 0, "remote_num_tokens %d", p.remote_num_tokens);
  TROUPE_FUZZ_CHECK(!p.first_token_id || *p.first_token_id >= 0, "first_token_id %d",
                    *p.first_token_id);
  for (const int32_t id : p.remote_block_ids) TROUPE_FUZZ_CHECK(id >= 0, "block id %d", id);
  for (const std::vector<int32_t>& group : p.remote_sliding_block_ids) {
    for (const int32_t id : group) TROUPE_FUZZ_CHECK(id >= -1, "sliding block id %d", id);
  }
}

std::string params_json(const KvTransferParams& p) {
  net::JsonWriter out;
  net::write_kv_transfer_params(out, p);
  return out.take();
}

void check_params(std::string_view text) {
  const auto parsed = net::parse_kv_transfer_params_json(text);
  const KvTransferParams* p = accepted(parsed, "kv_transfer_params");
  if (!p) return;
  check_params_in_range(*p);
  const std::string json = params_json(*p);
  TROUPE_FUZZ_CHECK(fuzz::is_valid_json(json), "written params are not JSON: %s", json.c_str());
  const auto again = net::parse_kv_transfer_params_json(json);
  const KvTransferParams* q = accepted(again, "kv_transfer_params (written)");
  TROUPE_FUZZ_CHECK(q != nullptr, "written params do not parse: %s: %s", json.c_str(),
                    std::get<std::string>(again).c_str());
  TROUPE_FUZZ_CHECK(same_params(*p, *q), "params changed in a round trip: %s", json.c_str());
}

void check_prefill_response(std::string_view text) {
  const auto parsed = net::parse_prefill_response(text);
  const KvTransferParams* p = accepted(parsed, "prefill response");
  if (!p) return;
  check_params_in_range(*p);
  TROUPE_FUZZ_CHECK(p->do_remote_prefill, "accepted without do_remote_prefill");
  TROUPE_FUZZ_CHECK(!p->remote_engine_id.empty() && !p->remote_request_id.empty(),
                    "accepted without an engine or request id");
  // The params a prefill server writes into its response are what this parser reads back.
  const std::string body = R"({"id":"cmpl-1","kv_transfer_params":)" + params_json(*p) + "}";
  TROUPE_FUZZ_CHECK(fuzz::is_valid_json(body), "written response is not JSON: %s", body.c_str());
  const auto again = net::parse_prefill_response(body);
  const KvTransferParams* q = accepted(again, "prefill response (written)");
  TROUPE_FUZZ_CHECK(q != nullptr, "written response does not parse: %s: %s", body.c_str(),
                    std::get<std::string>(again).c_str());
  TROUPE_FUZZ_CHECK(same_params(*p, *q), "params changed in a round trip: %s", body.c_str());
}

void check_metadata(std::string_view text) {
  const auto parsed = net::parse_kv_metadata(text);
  const KvMetadata* m = accepted(parsed, "kv_metadata");
  if (!m) return;
  const disagg::KvLayout& l = m->layout;
  TROUPE_FUZZ_CHECK(!m->engine_id.empty() && !m->descriptor.transport.empty() && !m->descriptor.worker_address.empty() &&
                        !m->descriptor.rkey.empty() && !m->compatibility_hash.empty() && !l.dtype.empty(),
                    "a required field is empty");
  TROUPE_FUZZ_CHECK(l.num_layers >= 1 && l.num_kv_heads >= 1 && l.head_dim >= 1 &&
                        l.block_size >= 1 && l.num_blocks >= 1 && l.block_bytes >= 1,
                    "layout counts %d %d %d %d %d %llu", l.num_layers, l.num_kv_heads, l.head_dim,
                    l.block_size, l.num_blocks, static_cast<unsigned long long>(l.block_bytes));
  // The end of the last block of the last layer's V, in arithmetic that cannot overflow.
  using u128 = unsigned __int128;
  const u128 end = u128(uint64_t(l.num_layers - 1)) * l.layer_stride + l.kv_stride +
                   u128(uint64_t(l.num_blocks)) * l.block_bytes;
  TROUPE_FUZZ_CHECK(end <= m->descriptor.region_bytes, "the layout leaves the region (%llu bytes)",
                    static_cast<unsigned long long>(m->descriptor.region_bytes));
  const std::string json = net::kv_metadata_json(*m);
  TROUPE_FUZZ_CHECK(fuzz::is_valid_json(json), "written metadata is not JSON: %s", json.c_str());
  const auto again = net::parse_kv_metadata(json);
  const KvMetadata* n = accepted(again, "kv_metadata (written)");
  TROUPE_FUZZ_CHECK(n != nullptr, "written metadata does not parse: %s: %s", json.c_str(),
                    std::get<std::string>(again).c_str());
  TROUPE_FUZZ_CHECK(same_metadata(*m, *n), "metadata changed in a round trip: %s", json.c_str());
}

// One input, checked; LLVMFuzzerTestOneInput below also bounds its CPU time.
void fuzz_one(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 4) {
    case 0: check_base64(text); break;
    case 1: check_params(text); break;
    case 2: check_metadata(text); break;
    default: check_prefill_response(text); break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::within_cpu_budget("disagg codec", size, 10.0, 50.0, [&] { fuzz_one(data, size); });
  return 0;
}
