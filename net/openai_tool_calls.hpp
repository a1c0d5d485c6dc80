// The tool calls of a chat answer in OpenAI's shapes (issue 19), from the generated text:
//   whole      parse_tool_call_answer(): content (text outside the calls; null when empty) and
//              message.tool_calls with ids "call_<24 hex>" and arguments as a JSON string;
//              a malformed call anywhere: no calls, the whole text as content (as vLLM)
//   streamed   ToolCallStreamer: per delta, the pieces to send — content text (a suffix that
//              could start a call is held back), then `delta.tool_calls` pieces: the call's
//              first chunk with index, id, type, name and arguments "", then argument fragments
//   finish_reason  "stop" becomes "tool_calls" once a call was made; "length" stays "length"
//              (the call is then cut off, as OpenAI reports it)
// The parsing itself is model/tool_call_parser.hpp (family-specific, pure).
//
// Thread-safety: a ToolCallStreamer is one choice's state (its sink's thread); the rest pure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/tool_call_parser.hpp"
#include "net/openai_response.hpp"

namespace troupe::net {

struct ToolCallAnswer {
  std::string content;
  std::vector<ToolCallOut> calls;
};

ToolCallAnswer parse_tool_call_answer(model::ToolCallFormat format, std::string_view text);

std::string_view finish_reason_with_calls(std::string_view finish_reason, bool made_calls);

class ToolCallStreamer {
 public:
  explicit ToolCallStreamer(model::ToolCallFormat format) : parser_(format) {}

  // One chunk each: content text, or tool-call pieces (never both).
  struct Piece {
    std::string content;
    std::vector<ToolCallOut> calls;
  };
  std::vector<Piece> feed(std::string_view text);
  std::vector<Piece> finish();
  bool made_calls() const { return parser_.num_calls() > 0; }

 private:
  std::vector<Piece> pieces(std::vector<model::ToolCallEvent>& events);

  model::ToolCallStreamParser parser_;
};

}  // namespace troupe::net
