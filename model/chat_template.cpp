// Built-in chat formats and template detection (see chat_template.hpp). Formats follow
// llama.cpp src/llama-chat.cpp.
#include "model/chat_template.hpp"

#include <array>
#include <stdexcept>
#include <utility>

#include "model/chat_template_internal.hpp"
#include "model/gguf.hpp"

namespace troupe::model {
namespace {

constexpr std::array<std::pair<std::string_view, ChatTemplateKind>, 10> kNames = {{
    {"chatml", ChatTemplateKind::kChatml},
    {"llama3", ChatTemplateKind::kLlama3},
    {"llama2", ChatTemplateKind::kLlama2},
    {"llama2-sys", ChatTemplateKind::kLlama2Sys},
    {"llama2-sys-bos", ChatTemplateKind::kLlama2SysBos},
    {"llama2-sys-strip", ChatTemplateKind::kLlama2SysStrip},
    {"mistral-v1", ChatTemplateKind::kMistralV1},
    {"mistral-v3", ChatTemplateKind::kMistralV3},
    {"mistral-v3-tekken", ChatTemplateKind::kMistralV3Tekken},
    {"gemma", ChatTemplateKind::kGemma},
}};

using chat_internal::PromptBuilder;
using chat_internal::trim;

void render_chatml(PromptBuilder& b, std::span<const ChatMessage> messages,
                   bool add_generation_prompt, const std::optional<std::string>& default_system) {
  if (default_system && !messages.empty() && messages.front().role != "system") {
    b.tmpl("<|im_start|>system\n").tmpl(*default_system).tmpl("<|im_end|>\n");
  }
  for (const ChatMessage& m : messages) {
    b.tmpl("<|im_start|>").user_text(m.role).tmpl("\n").user_text(m.content).tmpl("<|im_end|>\n");
  }
  if (add_generation_prompt) b.tmpl("<|im_start|>assistant\n");
}

// llama.cpp's LLM_CHAT_TEMPLATE_GEMMA: no system turn; the system texts (trimmed, joined) open
// the next non-model turn, followed by a blank line; "assistant" is "model"; contents trimmed.
void render_gemma(PromptBuilder& b, std::span<const ChatMessage> messages,
                  bool add_generation_prompt) {
  std::string system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system += trim(m.content);
      continue;
    }
    const bool model_turn = m.role == "assistant";
    b.tmpl("<start_of_turn>");
    if (model_turn) {
      b.tmpl("model");
    } else {
      b.user_text(m.role);
    }
    b.tmpl("\n");
    if (!system.empty() && !model_turn) {
      b.user_text(system).tmpl("\n\n");
      system.clear();
    }
    b.user_text(trim(m.content)).tmpl("<end_of_turn>\n");
  }
  if (add_generation_prompt) b.tmpl("<start_of_turn>model\n");
}

void render_llama3(PromptBuilder& b, std::span<const ChatMessage> messages,
                   bool add_generation_prompt) {
  for (const ChatMessage& m : messages) {
    b.tmpl("<|start_header_id|>").user_text(m.role).tmpl("<|end_header_id|>\n\n");
    b.user_text(trim(m.content)).tmpl("<|eot_id|>");
  }
  if (add_generation_prompt) b.tmpl("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

void render_llama2(PromptBuilder& b, std::span<const ChatMessage> messages, ChatTemplateKind kind) {
  const bool system_block = kind != ChatTemplateKind::kLlama2;
  const bool bos_inside_history = kind == ChatTemplateKind::kLlama2SysBos;
  const bool strip = kind == ChatTemplateKind::kLlama2SysStrip;
  b.tmpl("[INST] ");
  bool inside_turn = true;  // the first "[INST] " is already written; BOS comes from the tokenizer
  for (const ChatMessage& m : messages) {
    const std::string content = strip ? trim(m.content) : m.content;
    if (!inside_turn) {
      inside_turn = true;
      b.tmpl(bos_inside_history ? "<s>[INST] " : "[INST] ");
    }
    if (m.role == "system") {
      if (system_block) {
        b.tmpl("<<SYS>>\n").user_text(content).tmpl("\n<</SYS>>\n\n");
      } else {
        b.user_text(content).tmpl("\n");
      }
    } else if (m.role == "user") {
      b.user_text(content).tmpl(" [/INST]");
    } else {
      b.user_text(content).tmpl("</s>");
      inside_turn = false;
    }
  }
}

void render_mistral(PromptBuilder& b, std::span<const ChatMessage> messages,
                    ChatTemplateKind kind) {
  const std::string_view leading = kind == ChatTemplateKind::kMistralV1 ? " " : "";
  const std::string_view trailing = kind == ChatTemplateKind::kMistralV3Tekken ? "" : " ";
  const bool trim_assistant = kind == ChatTemplateKind::kMistralV3;
  bool inside_turn = false;
  for (const ChatMessage& m : messages) {
    if (!inside_turn) {
      b.tmpl(leading).tmpl("[INST]").tmpl(trailing);
      inside_turn = true;
    }
    if (m.role == "system") {
      b.user_text(m.content).tmpl("\n\n");
    } else if (m.role == "user") {
      b.user_text(m.content).tmpl(leading).tmpl("[/INST]");
    } else {
      b.tmpl(trailing).user_text(trim_assistant ? trim(m.content) : m.content).tmpl("</s>");
      inside_turn = false;
    }
  }
}

}  // namespace

namespace chat_internal {

std::string trim(std::string_view s) {
  auto space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  };
  size_t b = 0, e = s.size();
  while (b < e && space(s[b])) ++b;
  while (e > b && space(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

}  // namespace chat_internal

ChatTemplate ChatTemplate::by_name(std::string_view name) {
  for (const auto& [n, kind] : kNames) {
    if (n == name) return ChatTemplate(kind);
  }
  std::string known;
  for (const auto& [n, kind] : kNames) known += (known.empty() ? "" : ", ") + std::string(n);
  throw std::invalid_argument("unknown chat template name '" + std::string(name) +
                              "' (known: " + known + ")");
}

std::vector<std::string_view> ChatTemplate::names() {
  std::vector<std::string_view> out;
  for (const auto& [n, kind] : kNames) out.push_back(n);
  return out;
}

std::string_view ChatTemplate::name() const {
  for (const auto& [n, kind] : kNames) {
    if (kind == kind_) return n;
  }
  return "?";
}

std::optional<ChatTemplate> detect_chat_template(std::string_view tmpl) {
  for (const auto& [n, kind] : kNames) {
    if (n == tmpl) return ChatTemplate(kind);
  }
  auto contains = [&](std::string_view s) { return tmpl.find(s) != std::string_view::npos; };
  if (contains("<|im_start|>")) {
    if (contains("<|im_sep|>") || contains("<end_of_utterance>"))
      return std::nullopt;  // phi-4, SmolVLM
    std::optional<std::string> default_system;
    if (contains(kSmolLmDefaultSystemPrompt))
      default_system = std::string(kSmolLmDefaultSystemPrompt);
    return ChatTemplate(ChatTemplateKind::kChatml, std::move(default_system));
  }
  if (tmpl.starts_with("mistral") || contains("[INST]")) {
    if (contains("[SYSTEM_PROMPT]")) return std::nullopt;  // mistral-v7
    if (contains("' [INST] ' + system_message") || contains("[AVAILABLE_TOOLS]")) {
      if (contains(" [INST]")) return ChatTemplate(ChatTemplateKind::kMistralV1);
      if (contains("\"[INST]\"")) return ChatTemplate(ChatTemplateKind::kMistralV3Tekken);
      return ChatTemplate(ChatTemplateKind::kMistralV3);
    }
    if (contains("content.strip()")) return ChatTemplate(ChatTemplateKind::kLlama2SysStrip);
    if (contains("bos_token + '[INST]")) return ChatTemplate(ChatTemplateKind::kLlama2SysBos);
    if (contains("<<SYS>>")) return ChatTemplate(ChatTemplateKind::kLlama2Sys);
    return ChatTemplate(ChatTemplateKind::kLlama2);
  }
  if (contains("<|start_header_id|>") && contains("<|end_header_id|>"))
    return ChatTemplate(ChatTemplateKind::kLlama3);
  if (contains("<start_of_turn>")) return ChatTemplate(ChatTemplateKind::kGemma);
  return std::nullopt;
}

ChatTemplate ChatTemplate::from_jinja(std::optional<std::string_view> jinja,
                                      std::string_view configured_name,
                                      std::string_view architecture) {
  if (!configured_name.empty()) {
    ChatTemplate t = by_name(configured_name);
    // A configured "chatml" still honours the model's own default system prompt.
    if (t.kind() == ChatTemplateKind::kChatml && jinja) {
      if (auto detected = detect_chat_template(*jinja);
          detected && detected->kind() == ChatTemplateKind::kChatml) {
        return *detected;
      }
    }
    return t;
  }
  if (!jinja) {
    return ChatTemplate(architecture == "gemma3" ? ChatTemplateKind::kGemma
                                                 : ChatTemplateKind::kChatml);
  }
  if (auto detected = detect_chat_template(*jinja)) return *detected;
  std::string head(jinja->substr(0, 120));
  throw std::runtime_error(
      "unrecognised chat template in tokenizer.chat_template (\"" + head +
      "...\"); configure one of the built-in names (chatml, llama3, llama2, llama2-sys, "
      "llama2-sys-bos, llama2-sys-strip, mistral-v1, mistral-v3, mistral-v3-tekken, gemma)");
}

ChatTemplate ChatTemplate::for_model(const GgufFile& file, std::string_view configured_name) {
  return from_jinja(file.get_string("tokenizer.chat_template"), configured_name,
                    file.architecture());
}

ToolCallFormat ChatTemplate::tool_call_format() const {
  switch (kind_) {
    case ChatTemplateKind::kChatml: return ToolCallFormat::kHermes;
    case ChatTemplateKind::kLlama3: return ToolCallFormat::kLlama3Json;
    default: return ToolCallFormat::kNone;
  }
}

RenderedPrompt ChatTemplate::render(std::span<const ChatMessage> messages,
                                    bool add_generation_prompt,
                                    std::span<const ToolDefinition> tools) const {
  PromptBuilder b;
  // Without tools and tool messages the plain renderers stay byte-for-byte llama.cpp's.
  const bool tool_content = chat_internal::has_tool_content(messages, tools);
  switch (kind_) {
    case ChatTemplateKind::kChatml:
      if (tool_content) {
        chat_internal::render_chatml_tools(b, messages, add_generation_prompt,
                                           default_system_prompt_, tools);
      } else {
        render_chatml(b, messages, add_generation_prompt, default_system_prompt_);
      }
      break;
    case ChatTemplateKind::kLlama3:
      if (tool_content) {
        chat_internal::render_llama3_tools(b, messages, add_generation_prompt, tools);
      } else {
        render_llama3(b, messages, add_generation_prompt);
      }
      break;
    case ChatTemplateKind::kLlama2:
    case ChatTemplateKind::kLlama2Sys:
    case ChatTemplateKind::kLlama2SysBos:
    case ChatTemplateKind::kLlama2SysStrip:
      render_llama2(b, messages, kind_);  // no generation prompt: the model continues after [/INST]
      break;
    case ChatTemplateKind::kMistralV1:
    case ChatTemplateKind::kMistralV3:
    case ChatTemplateKind::kMistralV3Tekken: render_mistral(b, messages, kind_); break;
    case ChatTemplateKind::kGemma: render_gemma(b, messages, add_generation_prompt); break;
  }
  return b.take();
}

std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                 std::span<const ChatMessage> messages,
                                 bool add_generation_prompt, size_t max_tokens,
                                 std::span<const ToolDefinition> tools) {
  const RenderedPrompt prompt = chat_template.render(messages, add_generation_prompt, tools);
  std::vector<int32_t> ids;
  if (tokenizer.add_bos() && tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
  const std::vector<int32_t> body =
      tokenizer.encode_with_plain_spans(prompt.text, prompt.content_spans, max_tokens);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

}  // namespace troupe::model
