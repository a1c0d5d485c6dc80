// NOTE: every reader below treats an absent field and an explicit `null` alike and names the
// field, prefixed by the object it sits in ("kv_metadata.layout.block_size"), in its error.
#include "net/disagg_codec.hpp"

#include <simdjson.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "net/json_input.hpp"

namespace troupe::net {
namespace {

namespace dom = simdjson::dom;
using Error = std::optional<std::string>;

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

std::optional<dom::element> field(dom::object object, std::string_view key) {
  dom::element element;
  if (object[key].get(element) != simdjson::SUCCESS || element.is_null()) return std::nullopt;
  return element;
}

std::string must_be(std::string_view where, std::string_view key, std::string_view what) {
  return fmt::format("{}.{} must be {}", where, key, what);
}

std::string missing(std::string_view where, std::string_view key) {
  return fmt::format("{}.{} is missing", where, key);
}

Error read_bool(dom::object o, std::string_view where, std::string_view key, bool& out) {
  const auto e = field(o, key);
  if (!e) return std::nullopt;
  if (!e->is_bool()) return must_be(where, key, "a boolean");
  out = bool(*e);
  return std::nullopt;
}

Error read_string(dom::object o, std::string_view where, std::string_view key, std::string& out) {
  const auto e = field(o, key);
  if (!e) return std::nullopt;
  if (!e->is_string()) return must_be(where, key, "a string");
  out = std::string(std::string_view(*e));
  return std::nullopt;
}

std::optional<int64_t> as_integer(dom::element e) {
  switch (e.type()) {
    case dom::element_type::INT64: return int64_t(e);
    case dom::element_type::UINT64: return std::numeric_limits<int64_t>::max();  // out of range
    default: return std::nullopt;
  }
}

// An integer in [low, high] (both within int32 here, so the result fits an int32_t).
Error read_int32(dom::object o, std::string_view where, std::string_view key, int64_t low,
                 int64_t high, int32_t& out) {
  const auto e = field(o, key);
  if (!e) return std::nullopt;
  const auto v = as_integer(*e);
  if (!v) return must_be(where, key, "an integer");
  if (*v < low || *v > high) {
    return must_be(where, key, fmt::format("an integer in [{}, {}]", low, high));
  }
  out = static_cast<int32_t>(*v);
  return std::nullopt;
}

Error read_uint64(dom::object o, std::string_view where, std::string_view key, uint64_t& out) {
  const auto e = field(o, key);
  if (!e) return std::nullopt;
  if (e->type() == dom::element_type::UINT64) {
    out = uint64_t(*e);
  } else if (e->type() == dom::element_type::INT64 && int64_t(*e) >= 0) {
    out = static_cast<uint64_t>(int64_t(*e));
  } else {
    return must_be(where, key, "a non-negative integer");
  }
  return std::nullopt;
}

Error read_block_ids(dom::object o, std::string_view where, std::vector<int32_t>& out) {
  constexpr std::string_view kKey = "remote_block_ids";
  const auto e = field(o, kKey);
  if (!e) return std::nullopt;
  constexpr std::string_view kExpected = "an array of block ids (integers in [0, 2147483647])";
  if (!e->is_array()) return must_be(where, kKey, kExpected);
  for (const dom::element id : dom::array(*e)) {
    const auto v = as_integer(id);
    if (!v || *v < 0 || *v > kInt32Max) return must_be(where, kKey, kExpected);
    out.push_back(static_cast<int32_t>(*v));
  }
  return std::nullopt;
}

// troupe's remote_sliding_block_ids: an array per sliding KV group of block ids or -1 (freed).
Error read_sliding_block_ids(dom::object o, std::string_view where,
                             std::vector<std::vector<int32_t>>& out) {
  constexpr std::string_view kKey = "remote_sliding_block_ids";
  const auto e = field(o, kKey);
  if (!e || e->is_null()) return std::nullopt;
  constexpr std::string_view kExpected =
      "an array of arrays of block ids (integers in [-1, 2147483647], -1 for a freed page)";
  if (!e->is_array()) return must_be(where, kKey, kExpected);
  for (const dom::element group : dom::array(*e)) {
    if (!group.is_array()) return must_be(where, kKey, kExpected);
    std::vector<int32_t>& ids = out.emplace_back();
    for (const dom::element id : dom::array(group)) {
      const auto v = as_integer(id);
      if (!v || *v < -1 || *v > kInt32Max) return must_be(where, kKey, kExpected);
      ids.push_back(static_cast<int32_t>(*v));
    }
  }
  return std::nullopt;
}

Error read_transfer_params(dom::object o, disagg::KvTransferParams& p) {
  constexpr std::string_view kWhere = "kv_transfer_params";
  if (auto err = read_bool(o, kWhere, "do_remote_decode", p.do_remote_decode)) return err;
  if (auto err = read_bool(o, kWhere, "do_remote_prefill", p.do_remote_prefill)) return err;
  if (auto err = read_string(o, kWhere, "remote_engine_id", p.remote_engine_id)) return err;
  if (auto err = read_block_ids(o, kWhere, p.remote_block_ids)) return err;
  if (auto err = read_sliding_block_ids(o, kWhere, p.remote_sliding_block_ids)) return err;
  if (auto err = read_string(o, kWhere, "remote_request_id", p.remote_request_id)) return err;
  if (auto err = read_string(o, kWhere, "remote_host", p.remote_host)) return err;
  if (auto err = read_int32(o, kWhere, "remote_port", 0, 65535, p.remote_port)) return err;
  if (auto err = read_int32(o, kWhere, "remote_num_tokens", 0, kInt32Max, p.remote_num_tokens)) {
    return err;
  }
  if (field(o, "first_token_id")) {
    int32_t token_id = 0;
    if (auto err = read_int32(o, kWhere, "first_token_id", 0, kInt32Max, token_id)) return err;
    p.first_token_id = token_id;
  }
  return std::nullopt;
}

// Parses `text` with this thread's parser; the element lives until the thread's next parse.
Error parse_json(std::string_view text, std::string_view what, dom::element& root) {
  thread_local dom::parser parser;
  if (const auto error = parser.parse(simdjson::padded_string(text)).get(root)) {
    return fmt::format("{}: {}", what, describe_bad_json(text, simdjson::error_message(error)));
  }
  return std::nullopt;
}

// --- KV metadata ---------------------------------------------------------------------------

Error read_required_string(dom::object o, std::string_view where, std::string_view key,
                           std::string& out) {
  if (!field(o, key)) return missing(where, key);
  if (auto err = read_string(o, where, key, out)) return err;
  if (out.empty()) return must_be(where, key, "a non-empty string");
  return std::nullopt;
}

Error read_required_base64(dom::object o, std::string_view where, std::string_view key,
                           std::string& out) {
  std::string text;
  if (auto err = read_required_string(o, where, key, text)) return err;
  auto bytes = base64_decode(text);
  if (!bytes) return must_be(where, key, "base64 (RFC 4648, padded)");
  out = std::move(*bytes);
  return std::nullopt;
}

Error read_required_uint64(dom::object o, std::string_view where, std::string_view key,
                           uint64_t& out) {
  if (!field(o, key)) return missing(where, key);
  return read_uint64(o, where, key, out);
}

Error read_required_count(dom::object o, std::string_view where, std::string_view key,
                          int32_t& out) {
  if (!field(o, key)) return missing(where, key);
  return read_int32(o, where, key, 1, kInt32Max, out);
}

// NOTE: a peer reads layer * layer_stride + kv * kv_stride + block * block_bytes (+ block_bytes)
// past base_address; the largest such end must lie inside the registered region, or a wrong
// layout would read (or write) memory outside it. An extent that overflows 64 bits never fits.
Error check_layout_fits(const disagg::KvMetadata& m) {
  const disagg::KvLayout& l = m.layout;
  uint64_t layers_end = 0;
  uint64_t blocks_end = 0;
  uint64_t end = 0;
  const bool overflow =
      __builtin_mul_overflow(uint64_t(l.num_layers - 1), l.layer_stride, &layers_end) ||
      __builtin_mul_overflow(uint64_t(l.num_blocks), l.block_bytes, &blocks_end) ||
      __builtin_add_overflow(layers_end, l.kv_stride, &end) ||
      __builtin_add_overflow(end, blocks_end, &end);
  if (overflow || end > m.descriptor.region_bytes) {
    return fmt::format(
        "kv_metadata.region_bytes ({}) is smaller than the layout's extent "
        "(layers {} x layer_stride {}, kv_stride {}, blocks {} x block_bytes {})",
        m.descriptor.region_bytes, l.num_layers, l.layer_stride, l.kv_stride, l.num_blocks, l.block_bytes);
  }
  return std::nullopt;
}

Error read_layout(dom::object o, disagg::KvLayout& l) {
  constexpr std::string_view kWhere = "kv_metadata.layout";
  if (auto err = read_required_count(o, kWhere, "num_layers", l.num_layers)) return err;
  if (auto err = read_required_count(o, kWhere, "num_kv_heads", l.num_kv_heads)) return err;
  if (auto err = read_required_count(o, kWhere, "head_dim", l.head_dim)) return err;
  if (auto err = read_required_count(o, kWhere, "block_size", l.block_size)) return err;
  if (auto err = read_required_count(o, kWhere, "num_blocks", l.num_blocks)) return err;
  if (auto err = read_required_string(o, kWhere, "dtype", l.dtype)) return err;
  if (auto err = read_required_uint64(o, kWhere, "block_bytes", l.block_bytes)) return err;
  if (l.block_bytes == 0) return must_be(kWhere, "block_bytes", "positive");
  if (auto err = read_required_uint64(o, kWhere, "kv_stride", l.kv_stride)) return err;
  if (auto err = read_required_uint64(o, kWhere, "layer_stride", l.layer_stride)) return err;
  return std::nullopt;
}

Error read_metadata(dom::object o, disagg::KvMetadata& m) {
  constexpr std::string_view kWhere = "kv_metadata";
  if (auto err = read_required_string(o, kWhere, "engine_id", m.engine_id)) return err;
  if (auto err = read_required_string(o, kWhere, "transport", m.descriptor.transport)) return err;
  if (auto err = read_required_base64(o, kWhere, "worker_address", m.descriptor.worker_address)) return err;
  if (auto err = read_required_base64(o, kWhere, "rkey", m.descriptor.rkey)) return err;
  if (auto err = read_required_uint64(o, kWhere, "base_address", m.descriptor.base_address)) return err;
  if (auto err = read_required_uint64(o, kWhere, "region_bytes", m.descriptor.region_bytes)) return err;
  const auto layout = field(o, "layout");
  if (!layout) return missing(kWhere, "layout");
  if (!layout->is_object()) return must_be(kWhere, "layout", "an object");
  if (auto err = read_layout(dom::object(*layout), m.layout)) return err;
  if (auto err = read_required_string(o, kWhere, "compatibility_hash", m.compatibility_hash)) {
    return err;
  }
  return check_layout_fits(m);
}

// --- prefill request ------------------------------------------------------------------------

// A float knob in its shortest float spelling (0.7f is "0.7", not 0.699999988079071).
void write_float(JsonWriter& out, std::string_view key, float value) {
  if (!std::isfinite(value)) return;  // validated upstream; never emit invalid JSON
  out.key(key).raw(fmt::format("{}", value));
}

void write_sampling(JsonWriter& out, const model::SamplingParams& s) {
  if (s.temperature != 1.0f) write_float(out, "temperature", s.temperature);
  if (s.top_p != 1.0f) write_float(out, "top_p", s.top_p);
  if (s.top_k > 0) out.field("top_k", s.top_k);
  if (s.min_p != 0.0f) write_float(out, "min_p", s.min_p);
  // An absent seed is 0 for a one-choice request (openai_request.cpp), so 0 need not travel.
  if (s.seed != 0) out.field("seed", s.seed);
  if (s.repetition_penalty != 1.0f) write_float(out, "repetition_penalty", s.repetition_penalty);
  if (s.presence_penalty != 0.0f) write_float(out, "presence_penalty", s.presence_penalty);
  if (s.frequency_penalty != 0.0f) write_float(out, "frequency_penalty", s.frequency_penalty);
  if (!s.logit_bias.empty()) {
    out.key("logit_bias").begin_object();
    for (const model::LogitBias& entry : s.logit_bias) {
      write_float(out, std::to_string(entry.token_id), entry.bias);
    }
    out.end_object();
  }
  // See the header: max_tokens is 1 here, and min_tokens may not exceed it.
  if (s.min_tokens > 0) out.field("min_tokens", 1);
}

}  // namespace

DisaggParsed<disagg::KvTransferParams> parse_kv_transfer_params(dom::element params) {
  if (!params.is_object()) return std::string("kv_transfer_params must be an object");
  disagg::KvTransferParams result;
  if (auto err = read_transfer_params(dom::object(params), result)) return *err;
  return result;
}

DisaggParsed<disagg::KvTransferParams> parse_kv_transfer_params_json(std::string_view json) {
  dom::element root;
  if (auto err = parse_json(json, "kv_transfer_params", root)) return *err;
  return parse_kv_transfer_params(root);
}

void write_kv_transfer_params(JsonWriter& out, const disagg::KvTransferParams& params) {
  out.begin_object()
      .field("do_remote_decode", params.do_remote_decode)
      .field("do_remote_prefill", params.do_remote_prefill)
      .field("remote_engine_id", params.remote_engine_id);
  out.key("remote_block_ids").begin_array();
  for (const int32_t id : params.remote_block_ids) out.value(id);
  out.end_array();
  if (!params.remote_sliding_block_ids.empty()) {
    out.key("remote_sliding_block_ids").begin_array();
    for (const std::vector<int32_t>& group : params.remote_sliding_block_ids) {
      out.begin_array();
      for (const int32_t id : group) out.value(id);
      out.end_array();
    }
    out.end_array();
  }
  out.field("remote_request_id", params.remote_request_id)
      .field("remote_host", params.remote_host)
      .field("remote_port", params.remote_port)
      .field("remote_num_tokens", params.remote_num_tokens);
  out.key("first_token_id");
  if (params.first_token_id) {
    out.value(*params.first_token_id);
  } else {
    out.null();
  }
  out.field("tp_size", 1).end_object();
}

std::string kv_metadata_json(const disagg::KvMetadata& m) {
  const disagg::KvLayout& l = m.layout;
  JsonWriter out;
  out.begin_object()
      .field("engine_id", m.engine_id)
      .field("transport", m.descriptor.transport)
      .field("worker_address", base64_encode(m.descriptor.worker_address))
      .field("rkey", base64_encode(m.descriptor.rkey))
      .field("base_address", m.descriptor.base_address)
      .field("region_bytes", m.descriptor.region_bytes);
  out.key("layout")
      .begin_object()
      .field("num_layers", l.num_layers)
      .field("num_kv_heads", l.num_kv_heads)
      .field("head_dim", l.head_dim)
      .field("block_size", l.block_size)
      .field("num_blocks", l.num_blocks)
      .field("dtype", l.dtype)
      .field("block_bytes", l.block_bytes)
      .field("kv_stride", l.kv_stride)
      .field("layer_stride", l.layer_stride)
      .end_object();
  out.field("compatibility_hash", m.compatibility_hash).end_object();
  return out.take();
}

DisaggParsed<disagg::KvMetadata> parse_kv_metadata(std::string_view body) {
  dom::element root;
  if (auto err = parse_json(body, "kv_metadata", root)) return *err;
  if (!root.is_object()) return std::string("kv_metadata must be a JSON object");
  disagg::KvMetadata metadata;
  if (auto err = read_metadata(dom::object(root), metadata)) return *err;
  return metadata;
}

std::string prefill_request_json(const disagg::PrefillCall& call) {
  JsonWriter out;
  out.begin_object().key("prompt").begin_array();
  for (const int32_t id : call.prompt_token_ids) out.value(id);
  out.end_array().field("max_tokens", 1).field("stream", false);
  out.key("kv_transfer_params").begin_object().field("do_remote_decode", true).end_object();
  write_sampling(out, call.sampling);
  if (!call.stop_token_ids.empty()) {
    out.key("stop_token_ids").begin_array();
    for (const int32_t id : call.stop_token_ids) out.value(id);
    out.end_array();
  }
  if (call.ignore_eos) out.field("ignore_eos", true);
  if (call.priority != Priority::kNormal) out.field("priority", to_string(call.priority));
  if (!call.client.empty()) out.field("user", call.client);
  out.end_object();
  return out.take();
}

DisaggParsed<disagg::KvTransferParams> parse_prefill_response(std::string_view body) {
  constexpr std::string_view kWhat = "prefill response";
  dom::element root;
  if (auto err = parse_json(body, kWhat, root)) return *err;
  if (!root.is_object()) return fmt::format("{} is not a JSON object", kWhat);
  const auto element = field(dom::object(root), "kv_transfer_params");
  if (!element) return fmt::format("{} has no kv_transfer_params", kWhat);
  auto parsed = parse_kv_transfer_params(*element);
  if (auto* err = std::get_if<std::string>(&parsed)) return fmt::format("{}: {}", kWhat, *err);
  const auto& params = std::get<disagg::KvTransferParams>(parsed);
  if (!params.do_remote_prefill) {
    return fmt::format("{}: kv_transfer_params.do_remote_prefill is not true", kWhat);
  }
  if (params.remote_engine_id.empty()) {
    return fmt::format("{}: kv_transfer_params.remote_engine_id is missing or empty", kWhat);
  }
  if (params.remote_request_id.empty()) {
    return fmt::format("{}: kv_transfer_params.remote_request_id is missing or empty", kWhat);
  }
  if (!field(dom::object(*element), "remote_block_ids")) {
    return fmt::format("{}: kv_transfer_params.remote_block_ids is missing", kWhat);
  }
  return parsed;
}

// --- base64 ---------------------------------------------------------------------------------

namespace {

constexpr std::string_view kBase64Alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Each byte's 6-bit value, or -1 outside the alphabet.
constexpr std::array<int8_t, 256> base64_values() {
  std::array<int8_t, 256> values{};
  for (int8_t& v : values) v = -1;
  for (size_t i = 0; i < kBase64Alphabet.size(); ++i) {
    values[static_cast<unsigned char>(kBase64Alphabet[i])] = static_cast<int8_t>(i);
  }
  return values;
}
constexpr std::array<int8_t, 256> kBase64Values = base64_values();

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t group = uint32_t(uint8_t(bytes[i])) << 16 |
                           uint32_t(uint8_t(bytes[i + 1])) << 8 | uint8_t(bytes[i + 2]);
    for (int shift = 18; shift >= 0; shift -= 6) {
      out.push_back(kBase64Alphabet[group >> shift & 63]);
    }
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t group = uint32_t(uint8_t(bytes[i])) << 16;
    if (rest == 2) group |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out.push_back(kBase64Alphabet[group >> 18 & 63]);
    out.push_back(kBase64Alphabet[group >> 12 & 63]);
    out.push_back(rest == 2 ? kBase64Alphabet[group >> 6 & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  size_t padding = 0;
  if (!text.empty() && text.back() == '=') padding = text[text.size() - 2] == '=' ? 2 : 1;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  const size_t data_chars = text.size() - padding;
  uint32_t group = 0;
  for (size_t i = 0; i < data_chars; ++i) {
    const int8_t v = kBase64Values[static_cast<unsigned char>(text[i])];
    if (v < 0) return std::nullopt;  // includes a '=' before the end
    group = group << 6 | uint32_t(v);
    if (i % 4 == 3) {
      out.push_back(static_cast<char>(group >> 16));
      out.push_back(static_cast<char>(group >> 8 & 0xff));
      out.push_back(static_cast<char>(group & 0xff));
      group = 0;
    }
  }
  // The last quad's data chars: 2 carry one byte (4 spare bits), 3 carry two (2 spare bits);
  // canonical base64 leaves the spare bits zero.
  if (padding == 2) {
    if (group & 0xf) return std::nullopt;
    out.push_back(static_cast<char>(group >> 4));
  } else if (padding == 1) {
    if (group & 0x3) return std::nullopt;
    out.push_back(static_cast<char>(group >> 10));
    out.push_back(static_cast<char>(group >> 2 & 0xff));
  }
  return out;
}

}  // namespace troupe::net
