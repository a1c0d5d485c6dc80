#include "net/http_message.hpp"

#include <string>

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <fmt/format.h>

#include "net/http_framing.hpp"

namespace troupe::net {

namespace http = boost::beast::http;

HttpRequest to_plain_request(BeastRequest&& request) {
  HttpRequest plain;
  plain.method = std::string(request.method_string());
  plain.target = std::string(request.target());
  for (const auto& field : request) {
    plain.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  plain.body = std::move(request.body());
  return plain;
}

HttpResponse parse_error_response(const boost::beast::error_code& ec, uint64_t max_body_bytes) {
  if (ec == http::error::body_limit) {
    return error_response(413, fmt::format("request body exceeds the limit of {} bytes",
                                           max_body_bytes),
                          "invalid_request_error", {}, "request_too_large");
  }
  if (ec == http::error::header_limit) {
    return error_response(431, "request headers are too large", "invalid_request_error", {},
                          "headers_too_large");
  }
  if (ec == http::error::bad_transfer_encoding) {
    return error_response(400,
                          "invalid Transfer-Encoding header: it may appear once, must end in "
                          "chunked and must not come with a Content-Length",
                          "invalid_request_error", {}, "invalid_transfer_encoding");
  }
  if (ec == http::error::bad_content_length || ec == http::error::multiple_content_length) {
    return error_response(400,
                          fmt::format("invalid Content-Length header ({}); it must not come with a "
                                      "Transfer-Encoding",
                                      ec.message()),
                          "invalid_request_error", {}, "invalid_content_length");
  }
  return error_response(400, fmt::format("malformed HTTP request: {}", ec.message()),
                        "invalid_request_error", {}, "bad_request");
}

std::optional<HttpResponse> check_framing(const BeastRequest& header) {
  std::string transfer_encoding;
  for (const auto& field : header) {
    if (field.name() != http::field::transfer_encoding) continue;
    if (!transfer_encoding.empty()) transfer_encoding += ", ";
    transfer_encoding.append(field.value().data(), field.value().size());
  }
  return check_request_framing(transfer_encoding,
                               header.find(http::field::content_length) != header.end());
}

}  // namespace troupe::net
