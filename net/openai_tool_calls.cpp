// OpenAI tool-call shapes (see openai_tool_calls.hpp).
#include "net/openai_tool_calls.hpp"

#include <utility>

namespace troupe::net {

ToolCallAnswer parse_tool_call_answer(model::ToolCallFormat format, std::string_view text) {
  model::ParsedToolOutput parsed = model::parse_tool_calls(format, text);
  ToolCallAnswer answer;
  answer.content = std::move(parsed.content);
  int32_t index = 0;
  for (model::ParsedToolCall& call : parsed.calls) {
    answer.calls.push_back(ToolCallOut{index++, random_id("call_"), std::move(call.name),
                                       std::move(call.arguments), true});
  }
  return answer;
}

std::string_view finish_reason_with_calls(std::string_view finish_reason, bool made_calls) {
  return made_calls && finish_reason == "stop" ? std::string_view("tool_calls") : finish_reason;
}

std::vector<ToolCallStreamer::Piece> ToolCallStreamer::pieces(
    std::vector<model::ToolCallEvent>& events) {
  std::vector<Piece> out;
  for (model::ToolCallEvent& e : events) {
    switch (e.kind) {
      case model::ToolCallEvent::Kind::kContent:
        if (e.text.empty()) break;
        if (!out.empty() && out.back().calls.empty()) {
          out.back().content += e.text;
        } else {
          out.push_back(Piece{std::move(e.text), {}});
        }
        break;
      case model::ToolCallEvent::Kind::kCallBegin:
        out.push_back(Piece{{}, {ToolCallOut{e.call_index, random_id("call_"), std::move(e.text),
                                             {}, true}}});
        break;
      case model::ToolCallEvent::Kind::kArguments:
        if (!out.empty() && !out.back().calls.empty() &&
            out.back().calls.back().index == e.call_index && !out.back().calls.back().first) {
          out.back().calls.back().arguments += e.text;
        } else {
          out.push_back(Piece{{}, {ToolCallOut{e.call_index, {}, {}, std::move(e.text), false}}});
        }
        break;
    }
  }
  return out;
}

std::vector<ToolCallStreamer::Piece> ToolCallStreamer::feed(std::string_view text) {
  std::vector<model::ToolCallEvent> events;
  parser_.feed(text, events);
  return pieces(events);
}

std::vector<ToolCallStreamer::Piece> ToolCallStreamer::finish() {
  std::vector<model::ToolCallEvent> events;
  parser_.finish(events);
  return pieces(events);
}

}  // namespace troupe::net
