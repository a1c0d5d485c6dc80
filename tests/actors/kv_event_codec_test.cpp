// The msgpack bytes of a KV event batch, against Python's msgpack.packb of the same values in
// vLLM's shapes (kv_event_codec.hpp).
#include <gtest/gtest.h>

#include "actors/kv_cache/events/kv_event_codec.hpp"

namespace troupe::kv_cache {
namespace {

std::string hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

TEST(KvEventCodec, ArrayFormatMatchesVllmPositionalStructs) {
  // msgpack.packb([1.5, [["BlockStored", [1, 2**64-1], None, [1, 2], 2, None, "CPU", None],
  //   ["BlockStored", [300], 5, [70000, 0], 2, None, "CPU", None], ["BlockRemoved", [7], "CPU"],
  //   ["AllBlocksCleared"]], 0])
  KvEventBatch batch{1.5,
                     {BlockStored{{1, UINT64_MAX}, std::nullopt, {1, 2}, 2},
                      BlockStored{{300}, 5, {70000, 0}, 2}, BlockRemoved{{7}}, AllBlocksCleared{}}};
  EXPECT_EQ(hex(encode_kv_event_batch(batch, KvEventFormat::kArray, "CPU")),
            "93cb3ff80000000000009498ab426c6f636b53746f7265649201cfffffffffffffffffc092010202c0a3"
            "435055c098ab426c6f636b53746f72656491cd012c0592ce000111700002c0a3435055c093ac426c6f63"
            "6b52656d6f7665649107a343505591b0416c6c426c6f636b73436c656172656400");
}

TEST(KvEventCodec, MapFormatMatchesVllmTaggedMaps) {
  // msgpack.packb([1.5, [{"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None,
  //   "token_ids": [3, 4], "block_size": 2, "lora_id": None, "medium": "GPU", "lora_name": None,
  //   "extra_keys": [None], "group_idx": 0, "kv_cache_spec_kind": "full_attention"},
  //   {"type": "BlockRemoved", "block_hashes": [1], "medium": "GPU", "group_idx": 0},
  //   {"type": "AllBlocksCleared"}], 0])
  KvEventBatch batch{1.5, {BlockStored{{1}, std::nullopt, {3, 4}, 2}, BlockRemoved{{1}},
                           AllBlocksCleared{}}};
  EXPECT_EQ(hex(encode_kv_event_batch(batch, KvEventFormat::kMap, "GPU")),
            "93cb3ff8000000000000938ba474797065ab426c6f636b53746f726564ac626c6f636b5f686173686573"
            "9101b1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f696473920304aa626c6f636b5f73"
            "697a6502a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c0aa65787472615f"
            "6b65797391c0a967726f75705f69647800b26b765f63616368655f737065635f6b696e64ae66756c6c5f"
            "617474656e74696f6e84a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391"
            "01a66d656469756da3475055a967726f75705f6964780081a474797065b0416c6c426c6f636b73436c65"
            "6172656400");
}

TEST(KvEventCodec, FormatNamesRoundTrip) {
  EXPECT_EQ(parse_kv_event_format("map"), KvEventFormat::kMap);
  EXPECT_EQ(parse_kv_event_format("array"), KvEventFormat::kArray);
  EXPECT_EQ(parse_kv_event_format("json"), std::nullopt);
  EXPECT_EQ(to_string(KvEventFormat::kArray), "array");
}

}  // namespace
}  // namespace troupe::kv_cache
