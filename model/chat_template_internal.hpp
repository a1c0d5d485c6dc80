// Private to model/chat_template*.cpp: the prompt builder that records where untrusted text
// landed, and the renderers of the tool-calling families (chat_template_tools.cpp).
//
// Thread-safety: a PromptBuilder is one render's local value.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "model/chat_template.hpp"

namespace troupe::model::chat_internal {

// llama.cpp's trim(): ASCII whitespace at both ends.
std::string trim(std::string_view s);

// Appends template text and (untrusted) message text, remembering where the latter went. Role
// names come from the request too, so they are recorded as untrusted as well.
class PromptBuilder {
 public:
  PromptBuilder& tmpl(std::string_view s) {
    out_.text.append(s);
    return *this;
  }
  PromptBuilder& user_text(std::string_view s) {
    const size_t begin = out_.text.size();
    out_.text.append(s);
    if (!s.empty()) out_.content_spans.push_back(TextSpan{begin, out_.text.size()});
    return *this;
  }
  RenderedPrompt take() { return std::move(out_); }

 private:
  RenderedPrompt out_;
};

bool has_tool_content(std::span<const ChatMessage> messages, std::span<const ToolDefinition> tools);

// Qwen2.5's Hermes-style ChatML (its Jinja template's text, without Jinja).
void render_chatml_tools(PromptBuilder& b, std::span<const ChatMessage> messages,
                         bool add_generation_prompt, const std::optional<std::string>& default_system,
                         std::span<const ToolDefinition> tools);
// Meta's Llama 3.1 JSON tool calling (tools in the first user message, results as `ipython`).
void render_llama3_tools(PromptBuilder& b, std::span<const ChatMessage> messages,
                         bool add_generation_prompt, std::span<const ToolDefinition> tools);

}  // namespace troupe::model::chat_internal
