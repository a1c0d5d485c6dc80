// Request framing checks that Beast leaves to us (RFC 9112 §6). Beast refuses a Content-Length
// followed by a Transfer-Encoding, but accepts `Transfer-Encoding: gzip` followed by a
// Content-Length (and then trusts the Content-Length), and a Transfer-Encoding whose final coding
// is not chunked (and then reads no body, leaving the body's bytes to be parsed as the next
// request). Either way a proxy in front of us may see a different body length than we do: the
// shape of request smuggling. RFC 9112 §6.3: such a request gets 400 and the connection closes.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string_view>

#include "net/http_types.hpp"

namespace troupe::net {

// The error response for a request whose body length must not be trusted; nullopt when its
// framing is fine. `transfer_encoding` is every Transfer-Encoding field line joined with ", "
// (empty: the header is absent).
//   - 400: the final coding is not chunked, chunked appears twice, or a Content-Length comes
//     with a Transfer-Encoding;
//   - 501: chunked is final but another coding (gzip, ...) precedes it: we decode none
//     (RFC 9112 §6.1).
std::optional<HttpResponse> check_request_framing(std::string_view transfer_encoding,
                                                  bool has_content_length);

}  // namespace troupe::net
