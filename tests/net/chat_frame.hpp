// One server->client frame of the WebSocket chat protocol (net/ws_chat.cpp), parsed into the
// fields the tests look at: for the protocol's own tests and the server shutdown tests alike.
//
// Thread-safety: a value type and a pure function.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::net::testing {

struct ChatFrame {
  std::string type;
  std::string id;  // empty when the frame's id is null
  std::string text;
  std::string finish_reason;
  std::string code;
  std::string message;
  int64_t completion_tokens = -1;  // usage.completion_tokens, -1 when absent
  std::string raw;
};

// Fields the frame lacks stay empty; a frame that is not JSON throws simdjson_error.
inline ChatFrame parse_chat_frame(const std::string& raw) {
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(raw);
  ChatFrame frame;
  frame.raw = raw;
  const auto copy_string = [&root](const char* key, std::string& into) {
    std::string_view text;
    if (root[key].get_string().get(text) == simdjson::SUCCESS) into = text;
  };
  copy_string("type", frame.type);
  copy_string("id", frame.id);
  copy_string("text", frame.text);
  copy_string("finish_reason", frame.finish_reason);
  copy_string("code", frame.code);
  copy_string("message", frame.message);
  int64_t tokens = 0;
  if (root["usage"]["completion_tokens"].get_int64().get(tokens) == simdjson::SUCCESS) {
    frame.completion_tokens = tokens;
  }
  return frame;
}

}  // namespace troupe::net::testing
