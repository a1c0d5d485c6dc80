// Beast's parsed request to troupe's plain types, and the answers to what Beast refuses: the
// parts of an HTTP exchange that need no socket. Shared by the server's session
// (http_server.cpp) and the HTTP fuzz harness, so the harness drives the server's own code.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "net/http_types.hpp"

namespace troupe::net {

using BeastRequest = boost::beast::http::request<boost::beast::http::string_body>;

// Method, target, every header line in order, and the body (moved out).
HttpRequest to_plain_request(BeastRequest&& request);

// The response for a request Beast could not parse; the connection closes afterwards.
// `max_body_bytes` is the limit a 413 names.
HttpResponse parse_error_response(const boost::beast::error_code& ec, uint64_t max_body_bytes);

// The framing check of a parsed request header (http_framing.hpp): nullopt when it is fine.
std::optional<HttpResponse> check_framing(const BeastRequest& header);

}  // namespace troupe::net
