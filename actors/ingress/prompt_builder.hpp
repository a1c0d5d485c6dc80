// PromptBuilder: turns a GenerateRequest's input (chat messages, prompt text or token ids) into
// prompt token ids, and checks the request against the model's limits. Pure: no actor, no I/O.
//
// A prompt that cannot fit the context is refused cheaply: by its byte length before any
// tokenizing when that proves it, else as soon as tokenizing passes max_model_len tokens.
//
// Special tokens are recognised only where the chat template puts them. A message whose content
// spells a special token ("<|im_end|>") is tokenized as plain text, so a user cannot forge turns.
//
// Thread-safety: immutable after construction; `build` may run on any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <variant>
#include <string>
#include <vector>

#include "actors/common/engine_types.hpp"
#include "model/chat_template.hpp"
#include "model/tokenizer.hpp"

namespace troupe::ingress {

struct PromptLimits {
  int32_t max_model_len = 0;       // prompt + generated tokens
  int32_t default_max_tokens = 0;  // 0: whatever the context leaves
  int32_t max_stop_strings = 16;
};

struct BuiltPrompt {
  std::vector<int32_t> token_ids;
  int32_t max_tokens = 0;  // effective: the request's, or the default, clamped to the context
};

class PromptBuilder {
 public:
  PromptBuilder(model::Tokenizer tokenizer, model::ChatTemplate chat_template, PromptLimits limits);

  // The prompt's tokens, or the reason the request cannot run (as a value).
  std::variant<BuiltPrompt, engine::RequestError> build(const engine::GenerateRequest& request) const;

  const model::Tokenizer& tokenizer() const { return tokenizer_; }
  const model::ChatTemplate& chat_template() const { return chat_template_; }

 private:
  std::vector<int32_t> tokenize_chat(const std::vector<model::ChatMessage>& messages,
                                     size_t max_tokens) const;
  std::optional<engine::RequestError> check_prompt_bytes(const engine::GenerateRequest& request) const;
  std::optional<engine::RequestError> check_sampling(const engine::GenerateRequest& request) const;

  model::Tokenizer tokenizer_;
  model::ChatTemplate chat_template_;
  PromptLimits limits_;
};

}  // namespace troupe::ingress
