// AccessPolicy: which paths need a key, and the 401 (see access_policy.hpp).
#include "net/access_policy.hpp"

namespace troupe::net {

AccessPolicy::AccessPolicy(ApiKeys keys, bool metrics_require_key)
    : keys_(std::move(keys)), metrics_require_key_(metrics_require_key) {}

bool AccessPolicy::needs_key(std::string_view path) const {
  if (keys_.empty()) return false;
  if (path.starts_with("/v1/") || path == "/v1") return true;
  if (path == "/tokenize" || path == "/detokenize") return true;
  if (path == "/metrics") return metrics_require_key_;
  return false;
}

AccessDecision AccessPolicy::check(std::string_view path, std::string_view authorization,
                                   std::string_view websocket_protocols) const {
  AccessDecision decision;
  if (!needs_key(path)) return decision;
  const std::string_view header_key = bearer_token(authorization);
  const std::string protocol_key = split_websocket_protocols(websocket_protocols).key;
  if (header_key.empty() && protocol_key.empty()) {
    decision.refusal = unauthorized_response(
        "You didn't provide an API key. Send it as 'Authorization: Bearer <key>' (on a "
        "WebSocket, also as the subprotocol 'bearer.<key>').");
    return decision;
  }
  std::optional<std::string> name;
  if (!header_key.empty()) name = keys_.authenticate(header_key);
  if (!name && !protocol_key.empty()) name = keys_.authenticate(protocol_key);
  if (!name) {
    decision.refusal = unauthorized_response("Incorrect API key provided.");
    return decision;
  }
  decision.key_is_admin = keys_.is_admin(*name);
  decision.key_name = std::move(*name);
  return decision;
}

HttpResponse unauthorized_response(std::string_view message) {
  HttpResponse response = error_response(401, message, "authentication_error", {}, "invalid_api_key");
  response.headers.emplace_back("WWW-Authenticate", "Bearer");
  return response;
}

std::string chosen_websocket_protocol(std::string_view offered) {
  const WebSocketProtocolOffer offer = split_websocket_protocols(offered);
  return offer.others.empty() ? std::string() : offer.others.front();
}

}  // namespace troupe::net
