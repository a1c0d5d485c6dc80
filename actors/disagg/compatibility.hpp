// Whether two servers' KV is interchangeable (disaggregated prefill/decode handshake): same
// weights, same KV dtype and shape per block. A mismatch is refused at the handshake and the
// requests concerned are prefilled locally.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>

#include "actors/messages/disagg_types.hpp"

namespace troupe::model {
class GgufFile;
}

namespace troupe::disagg {

// Hex SHA-256 over every tensor's bytes of `file` (the weights: a requantized or different
// model differs) and the KV layout's dtype, layers, KV heads, head dim and block size.
std::string kv_compatibility_hash(const model::GgufFile& file, const KvLayout& layout);

// nullopt when a decode server with `mine` can pull KV described by `theirs`; otherwise why not.
std::optional<std::string> check_compatible(const KvMetadata& mine, const KvMetadata& theirs);

}  // namespace troupe::disagg
