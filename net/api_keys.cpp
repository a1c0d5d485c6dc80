// ApiKeys, bearer_token, split_websocket_protocols (see api_keys.hpp).
#include "net/api_keys.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace troupe::net {
namespace {

constexpr size_t kMaxKeyBytes = 512;
constexpr size_t kMaxNameBytes = 64;
constexpr std::string_view kWebSocketKeyPrefix = "bearer.";

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

bool is_valid_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  for (const char c : name) {
    if (!is_name_char(c)) return false;
  }
  return true;
}

// Printable ASCII without spaces: what fits in an HTTP header and a WebSocket subprotocol token
// without quoting, and what every key generator produces.
bool is_valid_key(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes) return false;
  for (const char c : key) {
    if (c <= ' ' || c > '~' || c == ',') return false;
  }
  return true;
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// A keys-file line's columns after its key: "rpm=N" and "tpm=N" (N a whole number, 0: no limit)
// over `limits` (the defaults), and "admin"; each at most once.
struct KeyColumns {
  RateLimits limits;
  bool admin = false;
};
KeyColumns parse_key_columns(std::string_view columns, RateLimits limits, std::string_view where) {
  constexpr int64_t kMaxLimit = int64_t{1} << 40;
  bool seen_rpm = false, seen_tpm = false, admin = false;
  while (!(columns = trim(columns)).empty()) {
    const size_t end = columns.find_first_of(" \t");
    const std::string_view column = columns.substr(0, end);
    columns = end == std::string_view::npos ? std::string_view{} : columns.substr(end);
    if (column == "admin") {
      if (admin) throw ApiKeyError(fmt::format("{}: admin is given twice", where));
      admin = true;
      continue;
    }
    const size_t equals = column.find('=');
    const std::string_view name = column.substr(0, equals);
    const bool rpm = name == "rpm", tpm = name == "tpm";
    if (equals == std::string_view::npos || !(rpm || tpm)) {
      // Not echoed: it may be the rest of a key with a blank in it.
      throw ApiKeyError(fmt::format(
          "{}: what follows the key is not a column (rpm=N, tpm=N, admin; a key has no blanks)",
          where));
    }
    if ((rpm && seen_rpm) || (tpm && seen_tpm)) {
      throw ApiKeyError(fmt::format("{}: {} is given twice", where, name));
    }
    const std::string_view digits = column.substr(equals + 1);
    int64_t value = 0;
    const bool whole = !digits.empty() && digits.size() <= 13 &&
                       digits.find_first_not_of("0123456789") == std::string_view::npos;
    if (whole) {
      for (const char c : digits) value = value * 10 + (c - '0');
    }
    if (!whole || value > kMaxLimit) {
      throw ApiKeyError(fmt::format("{}: {} must be a whole number of at most {} (0: no limit)",
                                    where, name, kMaxLimit));
    }
    (rpm ? limits.requests_per_minute : limits.tokens_per_minute) = value;
    (rpm ? seen_rpm : seen_tpm) = true;
  }
  return {limits, admin};
}

}  // namespace

ApiKeys::Digest ApiKeys::digest_of(std::string_view bytes) {
  Digest digest{};
  unsigned int length = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest.data(), &length, EVP_sha256(), nullptr) != 1 ||
      length != digest.size()) {
    throw std::runtime_error("SHA-256 failed (OpenSSL)");
  }
  return digest;
}

void ApiKeys::add(std::string name, std::string_view key, std::string_view source,
                  RateLimits limits, bool admin) {
  if (!is_valid_key(key)) {
    throw ApiKeyError(fmt::format(
        "{}: an API key must be 1-{} printable ASCII characters without spaces or commas",
        source, kMaxKeyBytes));
  }
  if (name.empty()) name = fmt::format("key-{}", keys_.size() + 1);
  for (const Stored& stored : keys_) {
    if (stored.name == name) throw ApiKeyError(fmt::format("{}: a second key named '{}'", source, name));
  }
  keys_.push_back({std::move(name), digest_of(key), limits, admin});
}

bool ApiKeys::is_admin(std::string_view name) const {
  for (const Stored& stored : keys_) {
    if (stored.name == name) return stored.admin;
  }
  return false;
}

std::vector<std::pair<std::string, RateLimits>> ApiKeys::limits() const {
  std::vector<std::pair<std::string, RateLimits>> out;
  for (const Stored& stored : keys_) out.emplace_back(stored.name, stored.limits);
  return out;
}

void ApiKeys::add_lines(std::string_view text, std::string_view source, RateLimits default_limits) {
  size_t line_number = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = trim(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    ++line_number;
    if (line.empty() || line.front() == '#') continue;
    const std::string where = fmt::format("{} line {}", source, line_number);
    // "NAME:KEY" only when what precedes the first ':' is a valid name; else all of it is the
    // key. After the key and a blank, its limit columns.
    const size_t colon = line.find(':');
    const bool named = colon != std::string_view::npos && is_valid_name(line.substr(0, colon));
    const std::string_view entry = named ? trim(line.substr(colon + 1)) : line;
    const size_t blank = entry.find_first_of(" \t");
    const std::string_view key = entry.substr(0, blank);
    const KeyColumns columns = blank == std::string_view::npos
                                   ? KeyColumns{default_limits}
                                   : parse_key_columns(entry.substr(blank), default_limits, where);
    add(named ? std::string(line.substr(0, colon)) : std::string(), key, where, columns.limits,
        columns.admin);
  }
}

ApiKeys ApiKeys::from_sources(const std::vector<std::string>& flag_keys,
                              const std::optional<std::filesystem::path>& keys_file,
                              std::string_view environment_key, RateLimits default_limits) {
  ApiKeys keys;
  for (const std::string& key : flag_keys) keys.add({}, key, "--api-key", default_limits);
  if (!environment_key.empty()) {
    keys.add({}, trim(environment_key), "TROUPE_API_KEY", default_limits);
  }
  if (keys_file) {
    std::ifstream in(*keys_file, std::ios::binary);
    if (!in) throw ApiKeyError(fmt::format("api.keys_file: cannot read {}", keys_file->string()));
    std::stringstream text;
    text << in.rdbuf();
    keys.add_lines(text.str(), keys_file->string(), default_limits);
  }
  return keys;
}

std::optional<std::string> ApiKeys::authenticate(std::string_view presented) const {
  const Digest digest = digest_of(presented);
  const Stored* match = nullptr;
  // Every key is compared, whatever matched before: the time does not depend on which one.
  for (const Stored& stored : keys_) {
    if (CRYPTO_memcmp(stored.digest.data(), digest.data(), digest.size()) == 0) match = &stored;
  }
  if (match == nullptr) return std::nullopt;
  return match->name;
}

std::string_view bearer_token(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer ";
  authorization = trim(authorization);
  if (authorization.size() <= kScheme.size()) return {};
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (lower(authorization[i]) != kScheme[i]) return {};
  }
  return trim(authorization.substr(kScheme.size()));
}

WebSocketProtocolOffer split_websocket_protocols(std::string_view header) {
  WebSocketProtocolOffer offer;
  while (!header.empty()) {
    const size_t comma = header.find(',');
    const std::string_view entry = trim(header.substr(0, comma));
    header = comma == std::string_view::npos ? std::string_view{} : header.substr(comma + 1);
    if (entry.empty()) continue;
    if (entry.size() > kWebSocketKeyPrefix.size() && entry.starts_with(kWebSocketKeyPrefix)) {
      offer.key = std::string(entry.substr(kWebSocketKeyPrefix.size()));
    } else {
      offer.others.emplace_back(entry);
    }
  }
  return offer;
}

}  // namespace troupe::net
