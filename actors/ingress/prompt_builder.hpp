// PromptBuilder: turns a GenerateRequest's input (chat messages, prompt text or token ids) into
// prompt token ids, and checks the request against the model's limits. Pure: no actor, no I/O.
//
// A prompt that cannot fit the context is refused cheaply: by its byte length before any
// tokenizing when that proves it, else as soon as tokenizing passes max_model_len tokens.
//
// Special tokens are recognised only where the chat template puts them. A message whose content
// spells a special token ("<|im_end|>") is tokenized as plain text, so a user cannot forge turns.
//
// Structured output (issue 19): a request's GrammarSpec is compiled here too, on the prompt
// worker (milliseconds to tens of them on a cache miss), by the engine's one shared
// GrammarCompiler; a spec that does not compile is a 400 naming the field it came from. Without
// a compiler (xgrammar not built, or a backend with no mask) every constrained request is a 400
// with the reason given to set_structured_output().
//
// Embeddings (issue 37): each input is tokenized on its own, and may fill the whole context
// (nothing is generated after it).
//
// Tool calling (issue 19): `tools` are rendered by the chat template (a family without a tool
// format: 400 naming `tools`), and unless tool_choice is "none" the grammar enforcing it
// (model/tool_calling.hpp) is compiled here like any structured output; a parameters schema that
// does not compile is a 400 naming `tools[i].function.parameters`.
//
// Thread-safety: immutable after construction (set_structured_output() only before it is
// shared); `build` may run on any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "actors/messages/engine_types.hpp"
#include "actors/messages/prompt_types.hpp"
#include "model/chat_template.hpp"
#include "model/grammar/grammar_compiler.hpp"
#include "model/tokenizer.hpp"

namespace troupe::ingress {

struct PromptLimits {
  int32_t max_model_len = 0;       // prompt + generated tokens
  int32_t default_max_tokens = 0;  // 0: whatever the context leaves
  int32_t max_stop_strings = 16;
};

class PromptBuilder {
 public:
  PromptBuilder(model::Tokenizer tokenizer, model::ChatTemplate chat_template, PromptLimits limits);

  // The prompt's tokens, or the reason the request cannot run (as a value).
  std::variant<BuiltPrompt, engine::RequestError> build(const engine::GenerateRequest& request) const;

  // compiler: null when this server cannot constrain output; then `unavailable` is the reason.
  void set_structured_output(std::shared_ptr<model::grammar::GrammarCompiler> compiler,
                             std::string unavailable);

  const model::Tokenizer& tokenizer() const { return tokenizer_; }
  const model::ChatTemplate& chat_template() const { return chat_template_; }

 private:
  std::vector<int32_t> tokenize_chat(const engine::GenerateRequest& request,
                                     size_t max_tokens) const;
  std::optional<engine::RequestError> check_prompt_bytes(const engine::GenerateRequest& request) const;
  std::optional<engine::RequestError> check_sampling(const engine::GenerateRequest& request) const;
  // An embeddings request's inputs, each tokenized as llama-server's /v1/embeddings does (BOS
  // and EOS where the tokenizer adds them, special tokens parsed); errors name `input[i]`.
  std::variant<BuiltPrompt, engine::RequestError> build_embedding(
      const engine::EmbeddingSpec& spec) const;

  std::optional<engine::RequestError> check_tools(const engine::GenerateRequest& request) const;
  std::optional<model::grammar::GrammarSpec> grammar_spec(const engine::GenerateRequest& request,
                                                          std::string& field) const;
  std::optional<engine::RequestError> compile_grammar(const engine::GenerateRequest& request,
                                                      BuiltPrompt& prompt) const;
  engine::RequestError tool_schema_error(const engine::GenerateRequest& request,
                                         const std::string& error) const;

  model::Tokenizer tokenizer_;
  model::ChatTemplate chat_template_;
  PromptLimits limits_;
  std::shared_ptr<model::grammar::GrammarCompiler> grammar_compiler_;
  std::string structured_output_unavailable_ = "structured output is not built into this server";
};

}  // namespace troupe::ingress
