// The block hashes a prefix-aware router computes on its own from a prompt's tokens, so that
// the events this server publishes name blocks the router can find (issue 20).
//
// The scheme is vLLM's `--prefix-caching-hash-algo sha256_cbor`, which llm-d's KV-cache indexer
// reproduces with `tokenProcessorConfig.hashAlgorithm: "sha256_cbor"`:
//
//   root      = SHA-256(CBOR(seed))                      seed: vLLM's PYTHONHASHSEED, a string
//   digest_i  = SHA-256(CBOR([digest_{i-1} or root,      32-byte byte string
//                             [t_0, ..., t_{bs-1}],      the block's token ids, unsigned ints
//                             null]))                    extra keys: none (no LoRA, no media)
//   key_i     = the last 8 bytes of digest_i, big-endian (what vLLM publishes with
//               VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, its default, and llm-d's "engine key")
//
// CBOR is canonical (RFC 8949 §4.2.1: shortest integer and length heads), as cbor2's
// canonical=True and Go's fxamacker/cbor CanonicalEncOptions write it.
//
// Thread-safety: a KvBlockHasher is immutable after construction; any thread may use it.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace troupe::kv_cache {

using BlockDigest = std::array<uint8_t, 32>;

class KvBlockHasher {
 public:
  explicit KvBlockHasher(std::string_view seed);

  const BlockDigest& root() const { return root_; }
  // The digest of a full block whose parent has digest `parent` (root() for the first block).
  BlockDigest block(const BlockDigest& parent, std::span<const int32_t> tokens) const;

  static uint64_t engine_key(const BlockDigest& digest);

 private:
  BlockDigest root_;
};

// The canonical CBOR of [parent, tokens, null]: exposed for tests.
std::string cbor_block_payload(const BlockDigest& parent, std::span<const int32_t> tokens);

}  // namespace troupe::kv_cache
