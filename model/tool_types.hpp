// OpenAI tool calling (issue 19) as plain values: the functions a request offers, how it lets the
// model use them, the calls of earlier assistant turns, and which tool-call format a chat
// template family was trained on. Built by the API layer (net/openai_tools.cpp), rendered by
// the chat template (chat_template_tools.cpp), enforced by a structural-tag grammar
// (tool_calling.hpp) and parsed back out of the generated text (tool_call_parser.hpp).
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::model {

// One function of `tools`.
struct ToolDefinition {
  std::string name;
  // `function.parameters`, minified JSON schema text; empty when the request gave none (any
  // JSON object is then accepted as the arguments).
  std::string parameters;
  // The whole tool object as the client sent it, minified JSON: the prompt shows the model the
  // signatures exactly as given (as vLLM renders `tools` into the Jinja template).
  std::string json;
};

// A call of an earlier assistant turn (`messages[i].tool_calls[j]`).
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text: OpenAI sends `function.arguments` as a string
};

enum class ToolChoiceMode : uint8_t {
  kNone,      // tools rendered into the prompt, output not parsed nor constrained (as vLLM)
  kAuto,      // free text; a call is constrained once its trigger appears (lazy grammar)
  kRequired,  // the output is one or more calls (one when !parallel)
  kNamed,     // the output is one call of `name`
};

struct ToolChoice {
  ToolChoiceMode mode = ToolChoiceMode::kAuto;
  std::string name;       // kNamed
  bool parallel = true;   // `parallel_tool_calls`: more than one call per turn allowed
};

// How a chat template family writes tool calls.
enum class ToolCallFormat : uint8_t {
  kNone,        // the family has no tool-calling format: `tools` is a 400
  kHermes,      // ChatML (SmolLM2, Qwen2.5): <tool_call>\n{"name": .., "arguments": ..}\n</tool_call>
  kLlama3Json,  // Llama 3.1 JSON tool calling: {"name": .., "parameters": ..}
};

std::string_view tool_call_format_name(ToolCallFormat format);

}  // namespace troupe::model
