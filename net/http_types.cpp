#include "net/http_types.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "net/json_writer.hpp"

namespace troupe::net {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<std::string> HttpRequest::query(std::string_view name) const {
  const std::string_view all = target;
  const size_t q = all.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view rest = all.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view{} : rest.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != name) continue;
    const std::string_view raw = eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
    std::string value;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '+') {
        value += ' ';
      } else if (raw[i] == '%' && i + 2 < raw.size() && hex_value(raw[i + 1]) >= 0 &&
                 hex_value(raw[i + 2]) >= 0) {
        value += static_cast<char>(hex_value(raw[i + 1]) * 16 + hex_value(raw[i + 2]));
        i += 2;
      } else {
        value += raw[i];
      }
    }
    return value;
  }
  return std::nullopt;
}

std::string_view HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key.size() == name.size() &&
        std::equal(key.begin(), key.end(), name.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) ==
                 std::tolower(static_cast<unsigned char>(b));
        })) {
      return value;
    }
  }
  return {};
}

std::variant<ListPage, HttpResponse> read_list_page(const HttpRequest& request, int32_t max_limit) {
  ListPage page;
  if (const auto limit = request.query("limit")) {
    int32_t value = 0;
    const auto [end, ec] = std::from_chars(limit->data(), limit->data() + limit->size(), value);
    if (ec != std::errc{} || end != limit->data() + limit->size() || value < 1 || value > max_limit) {
      return error_response(400, fmt::format("'limit' must be an integer in [1, {}].", max_limit),
                            "invalid_request_error", "limit", "invalid_value");
    }
    page.limit = value;
  }
  page.after = request.query("after");
  if (page.after && page.after->empty()) page.after.reset();
  return page;
}

HttpResponse error_response(int status, std::string_view message, std::string_view type,
                            std::string_view param, std::string_view code) {
  JsonWriter w;
  w.begin_object().key("error").begin_object();
  w.field("message", message).field("type", type);
  w.key("param");
  param.empty() ? w.null() : w.value(param);
  w.key("code");
  code.empty() ? w.null() : w.value(code);
  w.end_object().end_object();
  return json_response(status, w.take());
}

HttpResponse error_response(const ApiError& error) {
  HttpResponse response = error_response(error.status, error.message, error.type, error.param, error.code);
  response.headers.insert(response.headers.end(), error.headers.begin(), error.headers.end());
  return response;
}

HttpResponse json_response(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.body = std::move(body);
  return response;
}

}  // namespace troupe::net
