#include "actors/ingress/prompt_builder.hpp"

#include <fmt/format.h>

#include "model/tool_calling.hpp"

namespace troupe::ingress {
namespace {

using engine::ErrorCode;
using engine::RequestError;

RequestError invalid(std::string message, std::string param) {
  return RequestError{ErrorCode::kInvalidRequest, std::move(message), std::move(param)};
}

}  // namespace

void PromptBuilder::set_structured_output(std::shared_ptr<model::grammar::GrammarCompiler> compiler,
                                          std::string unavailable) {
  grammar_compiler_ = std::move(compiler);
  if (!unavailable.empty()) structured_output_unavailable_ = std::move(unavailable);
}

// The grammar a request's output must match: its structured output, or the one enforcing its
// tool_choice (the API layer refuses both at once); field: the request field it came from.
std::optional<model::grammar::GrammarSpec> PromptBuilder::grammar_spec(
    const engine::GenerateRequest& request, std::string& field) const {
  if (request.structured_output) {
    field = request.structured_output_field;
    return request.structured_output;
  }
  if (!request.parses_tool_calls()) return std::nullopt;
  field = request.tool_choice.mode == model::ToolChoiceMode::kAuto ? "tools" : "tool_choice";
  return model::tool_call_grammar(
      chat_template_.tool_call_format(), request.tools, request.tool_choice,
      grammar_compiler_ ? grammar_compiler_->config().json_max_whitespace : std::nullopt);
}

// NOTE: only this function calls into troupe_grammar: without xgrammar (TROUPE_HAVE_XGRAMMAR
// unset) the compiler is always null and nothing here needs the library.
std::optional<RequestError> PromptBuilder::compile_grammar(const engine::GenerateRequest& request,
                                                          BuiltPrompt& prompt) const {
  std::string field;
  const std::optional<model::grammar::GrammarSpec> spec = grammar_spec(request, field);
  if (!spec) return std::nullopt;
  // As the OpenAI parser refuses it (README, Structured output): min_tokens could demand text
  // past the grammar's end, where the mask allows only the end tokens min_tokens bans.
  if (request.sampling.min_tokens > 0) {
    return invalid(fmt::format("'min_tokens' cannot be combined with '{}'", field), "min_tokens");
  }
  if (!grammar_compiler_) {
    return invalid(fmt::format("'{}': {}", field, structured_output_unavailable_), field);
  }
#ifdef TROUPE_HAVE_XGRAMMAR
  model::grammar::CompileResult compiled = grammar_compiler_->compile(*spec);
  if (!compiled.ok()) {
    if (spec->kind == model::grammar::GrammarKind::kStructuralTag) {
      return tool_schema_error(request, compiled.error);
    }
    return invalid(fmt::format("Invalid '{}': {}", field, compiled.error), field);
  }
  prompt.grammar = std::make_shared<const model::grammar::CompiledGrammar>(std::move(*compiled.grammar));
  return std::nullopt;
#else
  (void)prompt;
  return invalid(fmt::format("'{}': {}", field, structured_output_unavailable_), field);
#endif
}

// A tool grammar that does not compile: the first tool whose parameters schema does not compile
// on its own is named (the structural tag's error does not say which tool it was).
RequestError PromptBuilder::tool_schema_error(const engine::GenerateRequest& request,
                                              const std::string& error) const {
#ifdef TROUPE_HAVE_XGRAMMAR
  for (size_t i = 0; i < request.tools.size(); ++i) {
    const model::ToolDefinition& tool = request.tools[i];
    if (tool.parameters.empty()) continue;
    const model::grammar::CompileResult one =
        grammar_compiler_->compile(model::grammar::GrammarSpec::json_schema(tool.parameters));
    if (!one.ok()) {
      const std::string param = fmt::format("tools[{}].function.parameters", i);
      return invalid(fmt::format("Invalid '{}': {}", param, one.error), param);
    }
  }
#endif
  return invalid(fmt::format("Invalid 'tools': {}", error), "tools");
}

// Tools need a chat template that has a tool-call format.
std::optional<RequestError> PromptBuilder::check_tools(const engine::GenerateRequest& request) const {
  if (request.tools.empty()) return std::nullopt;
  if (chat_template_.tool_call_format() == model::ToolCallFormat::kNone) {
    return invalid(fmt::format("'tools': this model's chat template ({}) has no tool-calling "
                               "format (tool calling is supported for the chatml and llama3 "
                               "families)", chat_template_.name()),
                   "tools");
  }
  return std::nullopt;
}

PromptBuilder::PromptBuilder(model::Tokenizer tokenizer, model::ChatTemplate chat_template,
                             PromptLimits limits)
    : tokenizer_(std::move(tokenizer)), chat_template_(std::move(chat_template)), limits_(limits) {}

std::vector<int32_t> PromptBuilder::tokenize_chat(const engine::GenerateRequest& request,
                                                 size_t max_tokens) const {
  // encode_chat tokenizes the whole rendering at once (exactly llama.cpp's ids) but refuses
  // special-token matches inside message contents and roles: user text cannot forge a turn.
  // It prepends BOS itself when the tokenizer asks for it.
  return model::encode_chat(tokenizer_, chat_template_, request.messages,
                            /*add_generation_prompt=*/true, max_tokens, request.tools);
}

// Issue 13: a prompt whose size alone proves it cannot fit is refused before any tokenizing
// (an 8 MB prompt took seconds to tokenize before its 400). Every token stands for at most
// max_token_bytes() bytes, so the text has at least bytes / max_token_bytes() tokens.
std::optional<RequestError> PromptBuilder::check_prompt_bytes(
    const engine::GenerateRequest& request) const {
  size_t bytes = request.prompt_text ? request.prompt_text->size() : 0;
  for (const model::ChatMessage& message : request.messages) bytes += message.content.size();
  for (const model::ToolDefinition& tool : request.tools) bytes += tool.json.size();
  const size_t at_least = bytes / tokenizer_.max_token_bytes();
  if (at_least < static_cast<size_t>(limits_.max_model_len)) return std::nullopt;
  return RequestError{ErrorCode::kPromptTooLong,
                      fmt::format("This model's maximum context length is {} tokens, but the "
                                  "prompt has at least {} tokens ({} bytes)",
                                  limits_.max_model_len, at_least, bytes),
                      request.messages.empty() ? "prompt" : "messages"};
}

std::optional<RequestError> PromptBuilder::check_sampling(
    const engine::GenerateRequest& request) const {
  const model::SamplingParams& s = request.sampling;
  if (!(s.temperature >= 0.0f && s.temperature <= 100.0f)) {
    return invalid("temperature must be between 0 and 100", "temperature");
  }
  if (!(s.top_p > 0.0f && s.top_p <= 1.0f)) return invalid("top_p must be in (0, 1]", "top_p");
  if (!(s.min_p >= 0.0f && s.min_p <= 1.0f)) return invalid("min_p must be in [0, 1]", "min_p");
  if (s.top_k < 0) return invalid("top_k must be >= 0 (0 disables it)", "top_k");
  if (!(s.repetition_penalty > 0.0f && s.repetition_penalty <= 10.0f)) {
    return invalid("repetition_penalty must be in (0, 10]", "repetition_penalty");
  }
  if (!(s.presence_penalty >= -2.0f && s.presence_penalty <= 2.0f)) {
    return invalid("presence_penalty must be in [-2, 2]", "presence_penalty");
  }
  if (!(s.frequency_penalty >= -2.0f && s.frequency_penalty <= 2.0f)) {
    return invalid("frequency_penalty must be in [-2, 2]", "frequency_penalty");
  }
  if (s.top_logprobs < 0 || s.top_logprobs > 20) {
    return invalid("top_logprobs must be in [0, 20]", "top_logprobs");
  }
  if (static_cast<int32_t>(request.stop.stop_strings.size()) > limits_.max_stop_strings) {
    return invalid(fmt::format("at most {} stop strings are allowed", limits_.max_stop_strings), "stop");
  }
  const auto vocab = static_cast<int32_t>(tokenizer_.vocab_size());
  for (int32_t id : request.stop.stop_token_ids) {
    if (id < 0 || id >= vocab) return invalid(fmt::format("stop token id {} is not in the vocabulary", id), "stop_token_ids");
  }
  // The wire parsers check the shape; only here is the vocabulary known.
  if (auto problem = model::check_logit_bias(s.logit_bias, vocab)) return invalid(*problem, "logit_bias");
  if (s.min_tokens < 0 || s.min_tokens > request.stop.max_tokens) {
    return invalid("min_tokens must be in [0, max_tokens]", "min_tokens");
  }
  return std::nullopt;
}

std::variant<BuiltPrompt, RequestError> PromptBuilder::build_embedding(
    const engine::EmbeddingSpec& spec) const {
  if (spec.inputs.empty()) return invalid("'input' is empty", "input");
  const auto limit = static_cast<size_t>(limits_.max_model_len);
  const auto vocab = static_cast<int32_t>(tokenizer_.vocab_size());
  BuiltPrompt built;
  built.inputs.reserve(spec.inputs.size());
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const engine::EmbeddingInput& input = spec.inputs[i];
    const std::string field = spec.inputs.size() == 1 ? "input" : fmt::format("input[{}]", i);
    const auto too_long = [&](std::string_view at_least, size_t count) {
      return RequestError{ErrorCode::kPromptTooLong,
                          fmt::format("This model's maximum context length is {} tokens, but {} "
                                      "has {}{} tokens",
                                      limits_.max_model_len, field, at_least, count),
                          field};
    };
    std::vector<int32_t> ids;
    if (input.text) {
      // As check_prompt_bytes(): a text too long to fit is refused before tokenizing it.
      const size_t at_least = input.text->size() / tokenizer_.max_token_bytes();
      if (at_least > limit) return too_long("at least ", at_least);
      if (tokenizer_.add_bos() && tokenizer_.bos_id() >= 0) ids.push_back(tokenizer_.bos_id());
      const std::vector<int32_t> body = tokenizer_.encode(*input.text, true, limit + 1);
      ids.insert(ids.end(), body.begin(), body.end());
      if (tokenizer_.add_eos() && tokenizer_.eos_id() >= 0) ids.push_back(tokenizer_.eos_id());
    } else {
      ids = input.token_ids;
      for (const int32_t id : ids) {
        if (id < 0 || id >= vocab) return invalid(fmt::format("token id {} is not in the vocabulary", id), field);
      }
    }
    if (ids.empty()) return invalid(fmt::format("'{}' is empty", field), field);
    // Tokenizing stops past limit + 1 ids: a count beyond that is only "more than the context".
    if (ids.size() > limit) {
      const bool stopped_early = input.text && ids.size() > limit + 1;
      return too_long(stopped_early ? "more than " : "", stopped_early ? limit : ids.size());
    }
    built.inputs.push_back(std::move(ids));
  }
  return built;
}

std::variant<BuiltPrompt, RequestError> PromptBuilder::build(
    const engine::GenerateRequest& request) const {
  if (request.embedding) return build_embedding(*request.embedding);
  if (auto error = check_sampling(request)) return *error;
  if (auto error = check_prompt_bytes(request)) return *error;
  if (auto error = check_tools(request)) return *error;
  // Tokenizing stops once the prompt is known not to fit (more than max_model_len ids).
  const auto limit = static_cast<size_t>(limits_.max_model_len);
  BuiltPrompt prompt;
  if (!request.messages.empty()) {
    prompt.token_ids = tokenize_chat(request, limit);
  } else if (request.prompt_text) {
    if (tokenizer_.add_bos() && tokenizer_.bos_id() >= 0) prompt.token_ids.push_back(tokenizer_.bos_id());
    const auto body = tokenizer_.encode(*request.prompt_text, true, limit);
    prompt.token_ids.insert(prompt.token_ids.end(), body.begin(), body.end());
  } else {
    prompt.token_ids = request.prompt_token_ids;
    const auto vocab = static_cast<int32_t>(tokenizer_.vocab_size());
    for (int32_t id : prompt.token_ids) {
      if (id < 0 || id >= vocab) return invalid(fmt::format("token id {} is not in the vocabulary", id), "prompt");
    }
  }
  if (prompt.token_ids.empty()) return invalid("the prompt is empty", request.messages.empty() ? "prompt" : "messages");
  if (request.echo || request.prompt_logprobs >= 0) {
    prompt.echo_text = request.prompt_text ? *request.prompt_text : tokenizer_.decode(prompt.token_ids);
  }

  const auto prompt_length = static_cast<int32_t>(prompt.token_ids.size());
  if (request.prompt_only && prompt_length <= limits_.max_model_len) {
    // Scored, not continued: the whole context may be prompt, and nothing is generated.
    prompt.max_tokens = 0;
    return prompt;
  }
  if (prompt_length >= limits_.max_model_len) {
    const bool stopped_early = request.prompt_token_ids.empty() && prompt.token_ids.size() > limit;
    return RequestError{ErrorCode::kPromptTooLong,
                        fmt::format("This model's maximum context length is {} tokens, but the "
                                    "prompt has {}{} tokens",
                                    limits_.max_model_len, stopped_early ? "more than " : "",
                                    stopped_early ? limits_.max_model_len : prompt_length),
                        request.messages.empty() ? "prompt" : "messages"};
  }
  const int32_t room = limits_.max_model_len - prompt_length;
  int32_t max_tokens = request.stop.max_tokens;
  if (max_tokens <= 0) max_tokens = limits_.default_max_tokens > 0 ? limits_.default_max_tokens : room;
  if (max_tokens > room) {
    // NOTE: 64-bit: max_tokens may be anything up to INT32_MAX, so the int32 sum could overflow.
    const int64_t requested = int64_t{prompt_length} + int64_t{max_tokens};
    return RequestError{ErrorCode::kPromptTooLong,
                        fmt::format("This model's maximum context length is {} tokens. However, "
                                    "you requested {} tokens ({} in the prompt, {} for the "
                                    "completion)",
                                    limits_.max_model_len, requested, prompt_length, max_tokens),
                        "max_tokens"};
  }
  prompt.max_tokens = max_tokens;
  if (auto error = compile_grammar(request, prompt)) return *error;
  return prompt;
}

}  // namespace troupe::ingress
