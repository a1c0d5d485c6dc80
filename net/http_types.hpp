// Plain HTTP request/response values. Handlers and codecs work on these, so they compile and
// test without Beast; only net/http_server.cpp converts to and from Beast's types.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe::net {

struct HttpRequest {
  std::string method;   // "GET", "POST", ...
  std::string target;   // path and query, as received
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  uint64_t connection_id = 0;  // the server's id of the TCP connection it came on (0: none)
  // The name of the API key that authenticated the request (access_policy.hpp); empty when the
  // server needs no key.
  std::string api_key_name;
  bool api_key_is_admin = false;  // that key has the keys file's `admin` column

  // The target without its query string.
  std::string_view path() const {
    const std::string_view t = target;
    return t.substr(0, t.find('?'));
  }
  // Case-insensitive header look-up; empty when absent.
  std::string_view header(std::string_view name) const;
  // The query parameter `name`, percent- and '+'-decoded; nullopt when absent.
  std::optional<std::string> query(std::string_view name) const;
};

// OpenAI's list paging, as /v1/files and /v1/batches read it: `limit` (an integer in
// [1, max_limit]; absent: nullopt) and `after` (an id; absent or empty: nullopt).
struct ListPage {
  std::optional<int32_t> limit;
  std::optional<std::string> after;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
};

// OpenAI's error shape: {"error":{"message","type","param","code"}}. `type` follows OpenAI's
// names ("invalid_request_error", "not_found_error", ...); `param` names the offending field.
HttpResponse error_response(int status, std::string_view message,
                            std::string_view type = "invalid_request_error",
                            std::string_view param = {}, std::string_view code = {});

HttpResponse json_response(int status, std::string body);

// The page a list request asks for, or the 400 naming `limit`.
std::variant<ListPage, HttpResponse> read_list_page(const HttpRequest& request, int32_t max_limit);

// An error on its way to the client, before it becomes a response (codecs return these).
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
  std::vector<std::pair<std::string, std::string>> headers;  // a 429's Retry-After, x-ratelimit-*
};

HttpResponse error_response(const ApiError& error);

}  // namespace troupe::net
