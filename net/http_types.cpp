#include "net/http_types.hpp"

#include <algorithm>
#include <cctype>

#include "net/json_writer.hpp"

namespace troupe::net {

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
  return error_response(error.status, error.message, error.type, error.param, error.code);
}

HttpResponse json_response(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.body = std::move(body);
  return response;
}

}  // namespace troupe::net
