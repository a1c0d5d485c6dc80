#include "actors/disagg/compatibility.hpp"

#include <openssl/evp.h>

#include <array>
#include <memory>

#include <fmt/format.h>

#include "model/gguf.hpp"

namespace troupe::disagg {

std::string kv_compatibility_hash(const model::GgufFile& file, const KvLayout& layout) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  for (const model::GgufTensorInfo& tensor : file.tensors()) {
    EVP_DigestUpdate(ctx.get(), tensor.name.data(), tensor.name.size());
    const auto bytes = tensor.bytes();
    EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size());
  }
  const std::string shape = fmt::format("kv:{}:{}:{}:{}:{}", layout.dtype, layout.num_layers,
                                        layout.num_kv_heads, layout.head_dim, layout.block_size);
  EVP_DigestUpdate(ctx.get(), shape.data(), shape.size());
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx.get(), digest.data(), &length);
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

std::optional<std::string> check_compatible(const KvMetadata& mine, const KvMetadata& theirs) {
  if (theirs.descriptor.transport != mine.descriptor.transport) {
    return fmt::format("the peer moves KV over '{}', this server over '{}'",
                       theirs.descriptor.transport, mine.descriptor.transport);
  }
  if (theirs.compatibility_hash != mine.compatibility_hash) {
    return fmt::format(
        "KV compatibility hash differs (peer {}…, here {}…): another model file, KV dtype or "
        "block size",
        theirs.compatibility_hash.substr(0, 12), mine.compatibility_hash.substr(0, 12));
  }
  const KvLayout& a = mine.layout;
  const KvLayout& b = theirs.layout;
  if (a.num_layers != b.num_layers || a.num_kv_heads != b.num_kv_heads ||
      a.head_dim != b.head_dim || a.block_size != b.block_size || a.dtype != b.dtype ||
      a.block_bytes != b.block_bytes) {
    return std::string("KV layout differs (layers, KV heads, head dim, block size or dtype)");
  }
  // NOTE: that the layout fits the peer's region is checked where the metadata is parsed
  // (net/disagg_codec.cpp); the transport checks every segment against it again.
  return std::nullopt;
}

}  // namespace troupe::disagg
