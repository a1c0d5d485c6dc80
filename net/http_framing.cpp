#include "net/http_framing.hpp"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace troupe::net {
namespace {

std::string_view trim_space(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

bool is_chunked(std::string_view coding) {
  constexpr std::string_view kChunked = "chunked";
  return coding.size() == kChunked.size() &&
         std::equal(coding.begin(), coding.end(), kChunked.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == b;
         });
}

// The codings of a Transfer-Encoding list, without parameters (";q=...") or empty elements.
std::vector<std::string_view> codings_of(std::string_view list) {
  std::vector<std::string_view> codings;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view element = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    element = trim_space(element.substr(0, element.find(';')));
    if (!element.empty()) codings.push_back(element);
  }
  return codings;
}

// The server closes the connection after any of these: what follows the header cannot be
// trusted to start a request.
HttpResponse framing_error(int status, const std::string& message, std::string_view code) {
  return error_response(status, message, "invalid_request_error", {}, code);
}

}  // namespace

std::optional<HttpResponse> check_request_framing(std::string_view transfer_encoding,
                                                  bool has_content_length) {
  if (trim_space(transfer_encoding).empty()) return std::nullopt;
  const std::vector<std::string_view> codings = codings_of(transfer_encoding);
  const std::string shown(trim_space(transfer_encoding).substr(0, 200));
  if (codings.empty() || !is_chunked(codings.back())) {
    return framing_error(400,
                         fmt::format("Transfer-Encoding '{}' does not end in chunked, so the "
                                     "request body's length cannot be determined (RFC 9112 §6.3)",
                                     shown),
                         "invalid_transfer_encoding");
  }
  if (std::count_if(codings.begin(), codings.end(), is_chunked) > 1) {
    return framing_error(
        400, fmt::format("Transfer-Encoding '{}' applies chunked more than once", shown),
        "invalid_transfer_encoding");
  }
  if (has_content_length) {
    return framing_error(400,
                         "Transfer-Encoding and Content-Length together make the request body's "
                         "length ambiguous; send one of them",
                         "invalid_transfer_encoding");
  }
  if (codings.size() > 1) {
    return framing_error(501,
                         fmt::format("Transfer-Encoding '{}' is not supported: only chunked is "
                                     "decoded",
                                     shown),
                         "unsupported_transfer_encoding");
  }
  return std::nullopt;
}

}  // namespace troupe::net
