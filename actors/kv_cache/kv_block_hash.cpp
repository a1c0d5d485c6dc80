// vLLM's sha256_cbor block hash (see kv_block_hash.hpp).
#include "actors/kv_cache/kv_block_hash.hpp"

#include <openssl/evp.h>

#include <stdexcept>

namespace troupe::kv_cache {
namespace {

// A CBOR head: major type and argument in the shortest form (canonical).
void cbor_head(std::string& out, uint8_t major, uint64_t value) {
  const auto type = static_cast<uint8_t>(major << 5);
  auto put_be = [&out](uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  if (value < 24) {
    out.push_back(static_cast<char>(type | value));
  } else if (value <= 0xff) {
    out.push_back(static_cast<char>(type | 24));
    put_be(value, 1);
  } else if (value <= 0xffff) {
    out.push_back(static_cast<char>(type | 25));
    put_be(value, 2);
  } else if (value <= 0xffffffffULL) {
    out.push_back(static_cast<char>(type | 26));
    put_be(value, 4);
  } else {
    out.push_back(static_cast<char>(type | 27));
    put_be(value, 8);
  }
}

constexpr uint8_t kUnsigned = 0, kBytes = 2, kText = 3, kArray = 4;
constexpr char kNull = static_cast<char>(0xf6);

BlockDigest sha256(const std::string& bytes) {
  BlockDigest digest{};
  unsigned int length = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest.data(), &length, EVP_sha256(), nullptr) != 1 ||
      length != digest.size()) {
    throw std::runtime_error("SHA-256 failed");
  }
  return digest;
}

}  // namespace

std::string cbor_block_payload(const BlockDigest& parent, std::span<const int32_t> tokens) {
  std::string out;
  out.reserve(40 + tokens.size() * 5);
  cbor_head(out, kArray, 3);
  cbor_head(out, kBytes, parent.size());
  out.append(reinterpret_cast<const char*>(parent.data()), parent.size());
  cbor_head(out, kArray, tokens.size());
  // Token ids are vocabulary indices, never negative.
  for (int32_t t : tokens) cbor_head(out, kUnsigned, static_cast<uint32_t>(t));
  out.push_back(kNull);
  return out;
}

KvBlockHasher::KvBlockHasher(std::string_view seed) {
  std::string encoded;
  cbor_head(encoded, kText, seed.size());
  encoded.append(seed);
  root_ = sha256(encoded);
}

BlockDigest KvBlockHasher::block(const BlockDigest& parent, std::span<const int32_t> tokens) const {
  return sha256(cbor_block_payload(parent, tokens));
}

uint64_t KvBlockHasher::engine_key(const BlockDigest& digest) {
  uint64_t key = 0;
  for (size_t i = digest.size() - 8; i < digest.size(); ++i) key = (key << 8) | digest[i];
  return key;
}

}  // namespace troupe::kv_cache
