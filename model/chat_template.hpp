// Chat templates: turn a list of messages into the prompt text a model was trained on.
//
// troupe does not run Jinja. It recognises `tokenizer.chat_template` (llama.cpp's
// llm_chat_detect_template rules, GGUF_NOTES §8) and renders the matching built-in format with
// the same output as llama.cpp's llm_chat_apply_template, except that a ChatML template which
// inserts a default system prompt (SmolLM2's) keeps doing so, as its Jinja does.
// The rendered text contains special-token texts, so it is encoded with special parsing; message
// contents are untrusted, so render() reports where they are and
// Tokenizer::encode_with_plain_spans keeps special-token texts inside them as plain text (a user
// cannot inject `<|im_end|>`). encode_chat() does both.
//
// Tool calling (issue 19): ChatML renders `tools`, assistant `tool_calls` and `tool` results the
// Hermes way of Qwen2.5's Jinja template, Llama 3 as Meta's Llama 3.1 JSON tool-calling template
// (chat_template_tools.cpp); the other families have no tool format (tool_call_format() kNone).
// Tool signatures, call arguments and tool results are untrusted content spans like any message.
//
// Thread-safety: immutable value type; any thread.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer.hpp"
#include "model/tool_types.hpp"

namespace troupe::model {

class GgufFile;

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant" | "tool" (others are passed through)
  std::string content;
  std::vector<ToolCall> tool_calls;  // assistant: the calls it made (content may be empty)
  std::string tool_call_id;          // tool: the call this result answers
};

struct RenderedPrompt {
  std::string text;
  std::vector<TextSpan> content_spans;  // where message contents (untrusted) landed in `text`
};

enum class ChatTemplateKind : uint8_t {
  kChatml,
  kLlama3,
  kLlama2,          // no <<SYS>>: the system text is prefixed to the first user turn
  kLlama2Sys,       // <<SYS>> block
  kLlama2SysBos,    // ... and "<s>[INST] " for later turns
  kLlama2SysStrip,  // ... and contents trimmed
  kMistralV1,
  kMistralV3,
  kMistralV3Tekken,
  kGemma,  // <start_of_turn>user|model; system text prefixed to the first user turn
};

// SmolLM2's default system prompt (its Jinja inserts it when the first message is not system).
inline constexpr std::string_view kSmolLmDefaultSystemPrompt =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

class ChatTemplate {
 public:
  explicit ChatTemplate(ChatTemplateKind kind,
                        std::optional<std::string> default_system_prompt = std::nullopt)
      : kind_(kind), default_system_prompt_(std::move(default_system_prompt)) {}

  // "chatml", "llama3", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip",
  // "mistral-v1", "mistral-v3", "mistral-v3-tekken", "gemma"; throws std::invalid_argument
  // otherwise.
  static ChatTemplate by_name(std::string_view name);
  static std::vector<std::string_view> names();

  // The template for a model: the configured name when given, else detected from
  // `tokenizer.chat_template`; none in the file: the architecture's own format (gemma3: Gemma,
  // whose GGUF conversions often carry no template), else ChatML. Throws std::runtime_error
  // naming the problem when the template is not recognised and no name is configured (a
  // start-up failure).
  static ChatTemplate for_model(const GgufFile& file, std::string_view configured_name = {});
  static ChatTemplate from_jinja(std::optional<std::string_view> jinja,
                                 std::string_view configured_name = {},
                                 std::string_view architecture = {});

  ChatTemplateKind kind() const { return kind_; }
  std::string_view name() const;
  const std::optional<std::string>& default_system_prompt() const { return default_system_prompt_; }

  ToolCallFormat tool_call_format() const;

  // `tools`: rendered into the prompt (only for a family with a tool-call format; the caller
  // refuses tools for the others). Messages with tool_calls / role "tool" render in the
  // family's tool format whether or not `tools` is given.
  RenderedPrompt render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                        std::span<const ToolDefinition> tools = {}) const;
  std::string apply(std::span<const ChatMessage> messages, bool add_generation_prompt,
                    std::span<const ToolDefinition> tools = {}) const {
    return render(messages, add_generation_prompt, tools).text;
  }

 private:
  ChatTemplateKind kind_;
  std::optional<std::string> default_system_prompt_;  // ChatML only
};

// The prompt ids for a chat: the template's special tokens parsed, the messages' not. Prepends
// BOS when the tokenizer asks for it (Llama 2/3; not SmolLM2).
// max_tokens: as Tokenizer::encode (more than max_tokens ids back means "too long").
std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                 std::span<const ChatMessage> messages, bool add_generation_prompt,
                                 size_t max_tokens = SIZE_MAX,
                                 std::span<const ToolDefinition> tools = {});

// llama.cpp's detection for the formats troupe renders; nullopt when unrecognised (or a format
// troupe does not implement, such as phi-4, SmolVLM or mistral-v7).
std::optional<ChatTemplate> detect_chat_template(std::string_view jinja);

}  // namespace troupe::model
