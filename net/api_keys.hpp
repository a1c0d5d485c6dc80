// API keys (issue 16): who may use the API. Keys come from `--api-key KEY` (repeatable), the
// file named by api.keys_file and the TROUPE_API_KEY environment variable. A keys file holds one
// key per line, optionally named ("NAME:KEY", NAME of [A-Za-z0-9_.-], at most 64 characters),
// optionally followed by that key's rate limits ("NAME:KEY rpm=60 tpm=100000": requests and
// tokens per minute, 0 for none; net/rate_limits.hpp) and `admin` (the key may act on other
// users' requests: the dashboard's cancel); blank lines and lines starting with '#'
// are skipped. An unnamed key is called "key-N" (N its position, from 1). A key without its own
// limits has the defaults (api.rate_limit_rpm / api.rate_limit_tpm).
//
// A presented key is compared with every configured key in constant time: both sides are
// reduced to SHA-256 digests and compared with CRYPTO_memcmp, so neither a key's bytes nor its
// length leak through timing. The keys themselves never leave this class; callers get the
// key's name (for logs, metrics labels and the fairness client).
//
// Thread-safety: build once at start; authenticate() is const and may run on every io thread.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe::net {

// A key's limits per minute (0: none).
struct RateLimits {
  int64_t requests_per_minute = 0;
  int64_t tokens_per_minute = 0;
  bool limited() const { return requests_per_minute > 0 || tokens_per_minute > 0; }
  bool operator==(const RateLimits&) const = default;
};

// A malformed key, name or keys file: an error at start, naming the source and line.
class ApiKeyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ApiKeys {
 public:
  ApiKeys() = default;  // no keys: authentication is off

  // All keys from every source (empty arguments: that source adds nothing), each with
  // `default_limits` unless its keys-file line sets its own. Throws ApiKeyError for a malformed
  // key, column or name, a duplicate name, or an unreadable file.
  static ApiKeys from_sources(const std::vector<std::string>& flag_keys,
                              const std::optional<std::filesystem::path>& keys_file,
                              std::string_view environment_key, RateLimits default_limits = {});
  // One key per entry of `lines`, as in a keys file; `source` names them in errors.
  void add_lines(std::string_view text, std::string_view source, RateLimits default_limits = {});
  void add(std::string name, std::string_view key, std::string_view source,
           RateLimits limits = {}, bool admin = false);

  // Whether the key named `name` is an admin's (the keys file's `admin` column).
  bool is_admin(std::string_view name) const;

  // Every key's name and limits, in the order they were added.
  std::vector<std::pair<std::string, RateLimits>> limits() const;

  bool empty() const { return keys_.empty(); }
  size_t size() const { return keys_.size(); }

  // The name of the configured key equal to `presented`, else nullopt. Constant time in the
  // bytes of `presented` and of every key.
  std::optional<std::string> authenticate(std::string_view presented) const;

 private:
  using Digest = std::array<unsigned char, 32>;
  struct Stored {
    std::string name;
    Digest digest;
    RateLimits limits;
    bool admin = false;
  };
  static Digest digest_of(std::string_view bytes);

  std::vector<Stored> keys_;
};

// The token of an `Authorization: Bearer <token>` value (scheme case-insensitive, surrounding
// spaces trimmed); empty when the value is not a bearer credential.
std::string_view bearer_token(std::string_view authorization);

// A `Sec-WebSocket-Protocol` offer split into the key a browser carries as "bearer.<key>" (it
// cannot set Authorization on a WebSocket) and the other, non-secret protocols, which are the
// only ones a server may echo back.
struct WebSocketProtocolOffer {
  std::string key;  // empty: none offered
  std::vector<std::string> others;
};
WebSocketProtocolOffer split_websocket_protocols(std::string_view header);

}  // namespace troupe::net
