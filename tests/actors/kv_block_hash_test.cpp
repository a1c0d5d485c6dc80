// The router's block hash (vLLM's sha256_cbor, llm-d's hashAlgorithm "sha256_cbor"). Expected
// values were computed in Python exactly as vLLM does (cbor2.dumps(x, canonical=True), hashlib):
//   root = sha256(cbor2.dumps(seed)); h = sha256(cbor2.dumps((parent, tuple(tokens), None)))
//   key = int.from_bytes(h, "big") & (2**64 - 1)
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "actors/kv_cache/kv_block_hash.hpp"

namespace troupe::kv_cache {
namespace {

std::string hex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

std::vector<int32_t> one_to_sixteen() {
  std::vector<int32_t> t(16);
  std::iota(t.begin(), t.end(), 1);
  return t;
}

// Token ids that need every CBOR integer width up to 4 bytes.
std::vector<int32_t> wide_tokens() {
  std::vector<int32_t> t;
  for (int i = 0; i < 4; ++i) t.insert(t.end(), {49151, 300, 70000, 0});
  return t;
}

TEST(KvBlockHash, CanonicalCborPayloadMatchesCbor2) {
  const BlockDigest zero{};
  const std::vector<int32_t> tokens{1, 24, 255, 256, 65535, 65536};
  const std::string payload = cbor_block_payload(zero, tokens);
  EXPECT_EQ(hex({reinterpret_cast<const uint8_t*>(payload.data()), payload.size()}),
            "835820" + std::string(64, '0') + "8601181818ff19010019ffff1a00010000f6");
}

TEST(KvBlockHash, EmptySeedChainMatchesVllm) {
  const KvBlockHasher hasher("");
  EXPECT_EQ(hex(hasher.root()), "8d33f520a3c4cef80d2453aef81b612bfe1cb44c8b2025630ad38662763f13d3");
  const BlockDigest first = hasher.block(hasher.root(), one_to_sixteen());
  EXPECT_EQ(hex(first), "38c16831a952cb649f1a41e30e9783c83903578c54cfa4822dda5dad95831187");
  EXPECT_EQ(KvBlockHasher::engine_key(first), 3304056276748800391ULL);
  const BlockDigest second = hasher.block(first, wide_tokens());
  EXPECT_EQ(KvBlockHasher::engine_key(second), 17338371031938162840ULL);
}

TEST(KvBlockHash, SeedChangesEveryKey) {
  const KvBlockHasher ten("10");
  EXPECT_EQ(hex(ten.root()), "087f4c7109d76636536c712c5121252018fa2dd0fddeba804f1df78494d8ea01");
  const BlockDigest first = ten.block(ten.root(), one_to_sixteen());
  EXPECT_EQ(KvBlockHasher::engine_key(first), 3503399340458755567ULL);
  EXPECT_EQ(KvBlockHasher::engine_key(ten.block(first, wide_tokens())), 8711242654844363936ULL);
  const KvBlockHasher zero("0");
  EXPECT_EQ(KvBlockHasher::engine_key(zero.block(zero.root(), one_to_sixteen())),
            3236607068019569386ULL);
}

}  // namespace
}  // namespace troupe::kv_cache
