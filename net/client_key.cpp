// client_key(): API key, else user, else connection (see client_key.hpp).
#include "net/client_key.hpp"

#include "net/api_keys.hpp"

#include <cstdint>
#include <random>

#include <fmt/format.h>

namespace troupe::net {
namespace {

constexpr size_t kMaxUserBytes = 64;

uint64_t process_salt() {
  static const uint64_t salt = [] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  }();
  return salt;
}

// FNV-1a over salt and key: not a MAC, but with a secret per-process salt the label cannot be
// looked up offline, and it never leaves the process with the key.
uint64_t salted_hash(std::string_view key) {
  uint64_t h = 0xcbf29ce484222325ULL ^ process_salt();
  for (const unsigned char c : key) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

// At most kMaxUserBytes, cut at a UTF-8 character boundary.
std::string_view clipped(std::string_view user) {
  if (user.size() <= kMaxUserBytes) return user;
  size_t end = kMaxUserBytes;
  while (end > 0 && (static_cast<unsigned char>(user[end]) & 0xC0) == 0x80) --end;
  return user.substr(0, end);
}

}  // namespace

std::string client_key(std::string_view key_name, std::string_view authorization,
                       std::string_view user, std::string_view connection) {
  if (!key_name.empty()) return fmt::format("key:{}", key_name);
  if (const std::string_view token = bearer_token(authorization); !token.empty()) {
    return fmt::format("key:{:016x}", salted_hash(token));
  }
  if (!user.empty()) return fmt::format("user:{}", clipped(user));
  return std::string(connection);
}

std::string http_connection_label(uint64_t connection_id) {
  return fmt::format("conn:{}", connection_id);
}

}  // namespace troupe::net
