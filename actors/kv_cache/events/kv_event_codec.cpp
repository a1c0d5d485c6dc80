// msgpack writing through MsgPuck (Debian's libmsgpuck-dev; see kv_event_codec.hpp for the shapes).
#include "actors/kv_cache/events/kv_event_codec.hpp"

#include <msgpuck.h>

#include <type_traits>

namespace troupe::kv_cache {

std::string_view to_string(KvEventFormat format) {
  return format == KvEventFormat::kMap ? "map" : "array";
}

std::optional<KvEventFormat> parse_kv_event_format(std::string_view text) {
  if (text == "map") return KvEventFormat::kMap;
  if (text == "array") return KvEventFormat::kArray;
  return std::nullopt;
}

namespace {

// Appends msgpack items to a string; each encoder writes at most `max` bytes.
class Packer {
 public:
  std::string take() { return std::move(out_); }

  void array(uint32_t n) { put(5, [n](char* p) { return mp_encode_array(p, n); }); }
  void map(uint32_t n) { put(5, [n](char* p) { return mp_encode_map(p, n); }); }
  void uint(uint64_t v) { put(9, [v](char* p) { return mp_encode_uint(p, v); }); }
  void real(double v) { put(9, [v](char* p) { return mp_encode_double(p, v); }); }
  void nil() { put(1, [](char* p) { return mp_encode_nil(p); }); }
  void str(std::string_view s) {
    put(5 + s.size(), [s](char* p) { return mp_encode_str(p, s.data(), static_cast<uint32_t>(s.size())); });
  }
  void uints(const std::vector<uint64_t>& values) {
    array(static_cast<uint32_t>(values.size()));
    for (uint64_t v : values) uint(v);
  }

 private:
  template <typename Encode>
  void put(size_t max, Encode encode) {
    const size_t old = out_.size();
    out_.resize(old + max);
    char* end = encode(out_.data() + old);
    out_.resize(static_cast<size_t>(end - out_.data()));
  }
  std::string out_;
};

void pack_stored(Packer& p, const BlockStored& e, KvEventFormat format, std::string_view medium) {
  const bool map = format == KvEventFormat::kMap;
  auto field = [&p, map](std::string_view name) {
    if (map) p.str(name);
  };
  if (map) {
    p.map(11);
    p.str("type");
  } else {
    p.array(8);
  }
  p.str("BlockStored");
  field("block_hashes");
  p.uints(e.block_hashes);
  field("parent_block_hash");
  if (e.parent_block_hash) {
    p.uint(*e.parent_block_hash);
  } else {
    p.nil();
  }
  field("token_ids");
  p.array(static_cast<uint32_t>(e.token_ids.size()));
  for (int32_t t : e.token_ids) p.uint(static_cast<uint32_t>(t));
  field("block_size");
  p.uint(static_cast<uint64_t>(e.block_size));
  field("lora_id");
  p.nil();
  field("medium");
  p.str(medium);
  field("lora_name");
  p.nil();
  if (!map) return;
  // What vLLM 0.24+ sends for a full-attention model without LoRA or media.
  p.str("extra_keys");
  p.array(static_cast<uint32_t>(e.block_hashes.size()));
  for (size_t i = 0; i < e.block_hashes.size(); ++i) p.nil();
  p.str("group_idx");
  p.uint(0);
  p.str("kv_cache_spec_kind");
  p.str("full_attention");
}

void pack_removed(Packer& p, const BlockRemoved& e, KvEventFormat format, std::string_view medium) {
  if (format == KvEventFormat::kMap) {
    p.map(4);
    p.str("type");
    p.str("BlockRemoved");
    p.str("block_hashes");
    p.uints(e.block_hashes);
    p.str("medium");
    p.str(medium);
    p.str("group_idx");
    p.uint(0);
  } else {
    p.array(3);
    p.str("BlockRemoved");
    p.uints(e.block_hashes);
    p.str(medium);
  }
}

void pack_cleared(Packer& p, KvEventFormat format) {
  if (format == KvEventFormat::kMap) {
    p.map(1);
    p.str("type");
  } else {
    p.array(1);
  }
  p.str("AllBlocksCleared");
}

}  // namespace

std::string encode_kv_event_batch(const KvEventBatch& batch, KvEventFormat format,
                                  std::string_view medium) {
  Packer p;
  p.array(3);
  p.real(batch.timestamp);
  p.array(static_cast<uint32_t>(batch.events.size()));
  for (const KvEvent& event : batch.events) {
    std::visit(
        [&](const auto& e) {
          using T = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<T, BlockStored>) {
            pack_stored(p, e, format, medium);
          } else if constexpr (std::is_same_v<T, BlockRemoved>) {
            pack_removed(p, e, format, medium);
          } else {
            pack_cleared(p, format);
          }
        },
        event);
  }
  p.uint(0);  // data_parallel_rank: one engine, rank 0 (vLLM fills it in the same way)
  return p.take();
}

}  // namespace troupe::kv_cache
