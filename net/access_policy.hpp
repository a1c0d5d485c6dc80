// Who may reach which surface (issue 16): the pure decision the HTTP server applies to every
// request right after its header is parsed, before the body is read, so an unauthenticated
// client costs no more than a 401.
//
// With no key configured everything is open. With keys:
//   /v1/* (the WebSocket chat /v1/chat/ws included), /tokenize, /detokenize  need a key;
//   /metrics                                   needs one when api.metrics_require_key (default);
//   /health, the web page and anything else    stay open (the page's own API calls are keyed).
// A key comes as `Authorization: Bearer KEY`, or, on a WebSocket upgrade only, as the
// `Sec-WebSocket-Protocol` entry "bearer.KEY" (browsers cannot set headers on a WebSocket).
// A refusal is 401 in OpenAI's error shape with `WWW-Authenticate: Bearer`; it never repeats
// the presented key.
//
// Thread-safety: build once at start; check() is const and may run on every io thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "net/api_keys.hpp"
#include "net/http_types.hpp"

namespace troupe::net {

struct AccessDecision {
  // Set when the request may not proceed: answer it and close the connection.
  std::optional<HttpResponse> refusal;
  // The name of the key that authenticated the request; empty when none was needed.
  std::string key_name;
  bool key_is_admin = false;  // that key has the keys file's `admin` column
};

class AccessPolicy {
 public:
  AccessPolicy() = default;  // no keys: every surface is open
  AccessPolicy(ApiKeys keys, bool metrics_require_key);

  bool keys_required() const { return !keys_.empty(); }
  size_t num_keys() const { return keys_.size(); }
  // Every key's name and rate limits (for the KeyRateLimiter).
  std::vector<std::pair<std::string, RateLimits>> key_limits() const { return keys_.limits(); }

  // Whether a request for `path` (no query string) needs a key under this policy.
  bool needs_key(std::string_view path) const;

  // `authorization`: the Authorization header ("" when absent); `websocket_protocols`: the
  // Sec-WebSocket-Protocol header of a WebSocket upgrade ("" for any other request).
  AccessDecision check(std::string_view path, std::string_view authorization,
                       std::string_view websocket_protocols) const;

 private:
  ApiKeys keys_;
  bool metrics_require_key_ = true;
};

// The 401 for a missing or wrong key (OpenAI's shape; code "invalid_api_key").
HttpResponse unauthorized_response(std::string_view message);

// The subprotocol a WebSocket handshake echoes for the client's `Sec-WebSocket-Protocol` offer:
// the first entry that is not a "bearer.KEY" credential, or "" (no header) when there is none.
// A secret is never echoed; a browser that offered protocols fails a handshake that answers
// none, so the web page offers "troupe.chat.v1" beside its key.
std::string chosen_websocket_protocol(std::string_view offered);

}  // namespace troupe::net
