// The tool-calling renderings of the ChatML and Llama 3 families (see chat_template.hpp). No
// Jinja runs here: these functions write the text the reference templates write.
//   ChatML: Qwen2.5-Instruct's tokenizer_config.json chat_template (Hermes-style), with the
//           model's own default system prompt (SmolLM2's) where Qwen's inserts its own.
//   Llama 3: Meta's Llama 3.1 template, JSON tool calling with the tools in the first user
//           message (its default, tools_in_user_message) and its default date string.
// Every text that comes from the request (system and user text, tool signatures, call names and
// arguments, tool results) is written with user_text(): special-token texts inside it stay
// plain text.
#include <string>

#include "model/chat_template_internal.hpp"
#include "model/python_json.hpp"

namespace troupe::model::chat_internal {
namespace {

// `tojson` of a JSON text: Python's layout when it parses, else the text as given (a client's
// arguments string that is not JSON is shown as sent rather than refused).
std::string tojson(std::string_view json, int indent = -1) {
  if (auto dumped = python_json_dumps(json, indent)) return std::move(*dumped);
  return std::string(json);
}

void write_hermes_tools_system(PromptBuilder& b, std::string_view system_text,
                               std::span<const ToolDefinition> tools) {
  b.tmpl("<|im_start|>system\n");
  if (!system_text.empty()) b.user_text(system_text).tmpl("\n\n");
  b.tmpl("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
         "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
  for (const ToolDefinition& tool : tools) b.tmpl("\n").user_text(tojson(tool.json));
  b.tmpl("\n</tools>\n\nFor each function call, return a json object with function name and "
         "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
         "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
}

}  // namespace

bool has_tool_content(std::span<const ChatMessage> messages, std::span<const ToolDefinition> tools) {
  if (!tools.empty()) return true;
  for (const ChatMessage& m : messages) {
    if (!m.tool_calls.empty() || m.role == "tool") return true;
  }
  return false;
}

void render_chatml_tools(PromptBuilder& b, std::span<const ChatMessage> messages,
                         bool add_generation_prompt, const std::optional<std::string>& default_system,
                         std::span<const ToolDefinition> tools) {
  const bool leading_system = !messages.empty() && messages.front().role == "system";
  if (!tools.empty()) {
    std::string_view system_text;
    if (leading_system) {
      system_text = messages.front().content;
    } else if (default_system) {
      system_text = *default_system;
    }
    write_hermes_tools_system(b, system_text, tools);
    if (leading_system) messages = messages.subspan(1);
  } else if (default_system && !leading_system) {
    b.tmpl("<|im_start|>system\n").tmpl(*default_system).tmpl("<|im_end|>\n");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") b.tmpl("<|im_start|>user");
      b.tmpl("\n<tool_response>\n").user_text(m.content).tmpl("\n</tool_response>");
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") b.tmpl("<|im_end|>\n");
    } else if (m.role == "assistant" && !m.tool_calls.empty()) {
      b.tmpl("<|im_start|>assistant");
      if (!m.content.empty()) b.tmpl("\n").user_text(m.content);
      for (const ToolCall& call : m.tool_calls) {
        b.tmpl("\n<tool_call>\n{\"name\": \"").user_text(call.name).tmpl("\", \"arguments\": ");
        b.user_text(tojson(call.arguments)).tmpl("}\n</tool_call>");
      }
      b.tmpl("<|im_end|>\n");
    } else {
      b.tmpl("<|im_start|>").user_text(m.role).tmpl("\n").user_text(m.content).tmpl("<|im_end|>\n");
    }
  }
  if (add_generation_prompt) b.tmpl("<|im_start|>assistant\n");
}

void render_llama3_tools(PromptBuilder& b, std::span<const ChatMessage> messages,
                         bool add_generation_prompt, std::span<const ToolDefinition> tools) {
  std::string system_text;
  if (!messages.empty() && messages.front().role == "system") {
    system_text = trim(messages.front().content);
    messages = messages.subspan(1);
  }
  b.tmpl("<|start_header_id|>system<|end_header_id|>\n\n");
  if (!tools.empty()) b.tmpl("Environment: ipython\n");
  b.tmpl("Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
  b.user_text(system_text).tmpl("<|eot_id|>");
  if (!tools.empty()) {
    b.tmpl("<|start_header_id|>user<|end_header_id|>\n\n");
    b.tmpl("Given the following functions, please respond with a JSON for a function call with its "
           "proper arguments that best answers the given prompt.\n\n"
           "Respond in the format {\"name\": function name, \"parameters\": dictionary of "
           "argument name and its value}.Do not use variables.\n\n");
    for (const ToolDefinition& tool : tools) b.user_text(tojson(tool.json, 4)).tmpl("\n\n");
    if (!messages.empty()) {
      b.user_text(trim(messages.front().content));
      messages = messages.subspan(1);
    }
    b.tmpl("<|eot_id|>");
  }
  for (const ChatMessage& m : messages) {
    if (m.role == "tool" || m.role == "ipython") {
      b.tmpl("<|start_header_id|>ipython<|end_header_id|>\n\n").user_text(m.content);
      b.tmpl("<|eot_id|>");
    } else if (!m.tool_calls.empty()) {
      // Meta's template takes one call per turn; several are joined with "; " (as vLLM's
      // llama3_json parser reads them back).
      b.tmpl("<|start_header_id|>assistant<|end_header_id|>\n\n");
      bool first = true;
      for (const ToolCall& call : m.tool_calls) {
        if (!first) b.tmpl("; ");
        first = false;
        b.tmpl("{\"name\": \"").user_text(call.name).tmpl("\", \"parameters\": ");
        b.user_text(tojson(call.arguments)).tmpl("}");
      }
      b.tmpl("<|eot_id|>");
    } else {
      b.tmpl("<|start_header_id|>").user_text(m.role).tmpl("<|end_header_id|>\n\n");
      b.user_text(trim(m.content)).tmpl("<|eot_id|>");
    }
  }
  if (add_generation_prompt) b.tmpl("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

}  // namespace troupe::model::chat_internal
