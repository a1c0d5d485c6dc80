#include "net/openai_response.hpp"

#include <algorithm>
#include <iterator>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "net/disagg_codec.hpp"
#include "net/json_input.hpp"
#include "net/json_writer.hpp"
#include "net/openai_tool_calls.hpp"

namespace troupe::net {
namespace {

std::string_view object_name(ApiKind kind, bool chunk) {
  switch (kind) {
    case ApiKind::kChat: return chunk ? "chat.completion.chunk" : "chat.completion";
    case ApiKind::kCompletion: return "text_completion";
  }
  return "text_completion";
}

void write_head(JsonWriter& w, const ResponseIdentity& identity, bool chunk) {
  w.field("id", identity.id).field("object", object_name(identity.kind, chunk));
  w.field("created", identity.created).field("model", identity.model);
  w.field("system_fingerprint", "troupe");
}

void write_bytes(JsonWriter& w, std::string_view text) {
  w.key("bytes").begin_array();
  for (const char c : text) w.value(static_cast<int>(static_cast<unsigned char>(c)));
  w.end_array();
}

// How logprobs name a token: its text, or "token_id:N" (LogprobsOutput::kTokenIds). `bytes`
// (chat) are always the token's own bytes.
struct TokenNames {
  const TokenTextFn& token_text;
  bool as_ids = false;

  static std::string id_name(int32_t id) { return fmt::format("token_id:{}", id); }
  std::string chosen(const engine::TokenInfo& token, bool legacy) const {
    if (as_ids) return id_name(token.token_id);
    return legacy ? legacy_token_string(token.text) : token.text;
  }
  std::string alternative(int32_t id, bool legacy) const {
    if (as_ids) return id_name(id);
    return legacy ? legacy_token_string(token_text(id)) : token_text(id);
  }
};

// Chat: {"content":[{"token","logprob","bytes","top_logprobs":[...]}]}
void write_chat_logprobs(JsonWriter& w, std::span<const engine::TokenInfo> tokens,
                         const TokenNames& names) {
  w.begin_object().key("content").begin_array();
  for (const engine::TokenInfo& token : tokens) {
    w.begin_object().field("token", names.chosen(token, false)).field("logprob", token.logprob);
    write_bytes(w, token.text);
    w.key("top_logprobs").begin_array();
    for (const auto& [id, logprob] : token.top_logprobs) {
      w.begin_object().field("token", names.alternative(id, false)).field("logprob", logprob);
      write_bytes(w, names.token_text(id));
      w.end_object();
    }
    w.end_array().end_object();
  }
  w.end_array().end_object();
}

// Completions: {"tokens","token_logprobs","top_logprobs":[{text: logprob}],"text_offset"}
void write_completion_logprobs(JsonWriter& w, std::span<const engine::TokenInfo> tokens,
                               size_t text_offset, const TokenNames& names) {
  w.begin_object().key("tokens").begin_array();
  for (const auto& token : tokens) w.value(names.chosen(token, true));
  w.end_array().key("token_logprobs").begin_array();
  // An echoed prompt's first token has no logprob (nothing precedes it): null, as OpenAI.
  for (const auto& token : tokens) token.has_logprob ? w.value(token.logprob) : w.null();
  w.end_array().key("top_logprobs").begin_array();
  std::vector<std::string> keys;
  for (const auto& token : tokens) {
    if (!token.has_logprob) {
      w.null();
      continue;
    }
    keys.clear();
    w.begin_object();
    for (const auto& [id, logprob] : token.top_logprobs) {
      std::string key = names.alternative(id, true);
      // NOTE: a JSON object must not repeat a key (clients keep one of the two and lose the
      // other's logprob). Distinct tokens can still share a text (special tokens render empty,
      // SentencePiece byte tokens equal one-byte pieces): those are named by id, as vLLM's
      // return_tokens_as_token_ids names tokens.
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) key = TokenNames::id_name(id);
      w.field(key, logprob);
      keys.push_back(std::move(key));
    }
    w.end_object();
  }
  w.end_array().key("text_offset").begin_array();
  size_t offset = text_offset;
  for (const auto& token : tokens) {
    w.value(static_cast<uint64_t>(offset));
    offset += token.text.size();
  }
  w.end_array().end_object();
}

void write_logprobs(JsonWriter& w, ApiKind kind, const ChunkContent& content,
                    const TokenTextFn& token_text) {
  w.key("logprobs");
  if (content.logprobs == LogprobsOutput::kNone) {
    w.null();
    return;
  }
  const TokenNames names{token_text, content.logprobs == LogprobsOutput::kTokenIds};
  switch (kind) {
    case ApiKind::kChat: write_chat_logprobs(w, content.tokens, names); break;
    case ApiKind::kCompletion:
      write_completion_logprobs(w, content.tokens, content.text_offset, names);
      break;
  }
}

// vLLM's `prompt_logprobs`: null for the first token, then per token an object keyed by token
// id — the prompt token first, then the best alternatives — of {logprob, rank, decoded_token}.
void write_prompt_logprobs(JsonWriter& w, const engine::PromptEcho& prompt, int32_t n,
                           const TokenTextFn& token_text) {
  w.key("prompt_logprobs").begin_array();
  for (const engine::TokenInfo& token : prompt.tokens) {
    if (!token.has_logprob) {
      w.null();
      continue;
    }
    w.begin_object();
    w.key(std::to_string(token.token_id)).begin_object().field("logprob", token.logprob);
    w.field("rank", token.rank).field("decoded_token", token.text).end_object();
    const size_t count = std::min(token.top_logprobs.size(), static_cast<size_t>(std::max(n, 0)));
    for (size_t k = 0; k < count; ++k) {
      const auto& [id, logprob] = token.top_logprobs[k];
      if (id == token.token_id) continue;
      w.key(std::to_string(id)).begin_object().field("logprob", logprob);
      w.field("rank", static_cast<int32_t>(k + 1)).field("decoded_token", token_text(id)).end_object();
    }
    w.end_object();
  }
  w.end_array();
}

void write_usage(JsonWriter& w, const engine::Usage& usage) {
  w.key("usage").begin_object();
  w.field("prompt_tokens", usage.prompt_tokens);
  w.field("completion_tokens", usage.completion_tokens);
  w.field("total_tokens", usage.prompt_tokens + usage.completion_tokens);
  w.key("prompt_tokens_details").begin_object();
  w.field("cached_tokens", usage.cached_prompt_tokens).end_object();
  w.end_object();
}

// "tool_calls":[{"index"?,"id","type","function":{"name","arguments"}}]; a stream's later
// pieces of a call carry only its index and the arguments fragment.
void write_tool_calls(JsonWriter& w, std::span<const ToolCallOut> calls, bool stream) {
  w.key("tool_calls").begin_array();
  for (const ToolCallOut& call : calls) {
    w.begin_object();
    if (stream) w.field("index", call.index);
    if (call.first) w.field("id", call.id).field("type", "function");
    w.key("function").begin_object();
    if (call.first) w.field("name", call.name);
    w.field("arguments", call.arguments).end_object();
    w.end_object();
  }
  w.end_array();
}

void write_finish_reason(JsonWriter& w, std::optional<std::string_view> finish_reason) {
  w.key("finish_reason");
  finish_reason ? w.value(*finish_reason) : w.null();
}

}  // namespace

std::string legacy_token_string(std::string_view token_bytes) {
  if (!first_invalid_utf8(token_bytes)) return std::string(token_bytes);
  std::string out = "bytes:";
  for (const char c : token_bytes) {
    fmt::format_to(std::back_inserter(out), "\\x{:02x}", static_cast<unsigned char>(c));
  }
  return out;
}

std::string random_id(std::string_view prefix) {
  thread_local std::mt19937_64 random{std::random_device{}()};
  const uint64_t high = random();
  const uint32_t low = static_cast<uint32_t>(random());
  return fmt::format("{}{:016x}{:08x}", prefix, high, low);
}

std::string make_response_id(ApiKind kind) {
  return random_id(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-");
}

std::string sse_event(std::string_view json) {
  std::string event;
  event.reserve(json.size() + 8);
  event.append("data: ").append(json).append("\n\n");
  return event;
}

std::string chunk_json(const ResponseIdentity& identity, const ChunkContent& content, bool first,
                       std::optional<std::string_view> finish_reason,
                       const TokenTextFn& token_text) {
  JsonWriter w;
  w.begin_object();
  write_head(w, identity, true);
  w.key("choices").begin_array().begin_object().field("index", content.index);
  switch (identity.kind) {
    case ApiKind::kChat:
      w.key("delta").begin_object();
      if (first) w.field("role", "assistant");
      if (!content.text.empty() || first) w.field("content", content.text);
      if (!content.tool_calls.empty()) write_tool_calls(w, content.tool_calls, /*stream=*/true);
      w.end_object();
      break;
    case ApiKind::kCompletion: w.field("text", content.text); break;
  }
  write_logprobs(w, identity.kind, content, token_text);
  write_finish_reason(w, finish_reason);
  if (content.prompt_logprobs && identity.kind == ApiKind::kCompletion) {
    write_prompt_logprobs(w, *content.prompt_logprobs, content.prompt_logprobs_n, token_text);
  }
  w.end_object().end_array();
  if (content.prompt_logprobs && identity.kind == ApiKind::kChat) {
    write_prompt_logprobs(w, *content.prompt_logprobs, content.prompt_logprobs_n, token_text);
  }
  w.end_object();
  return w.take();
}

std::vector<engine::TokenInfo> echoed_tokens(const engine::PromptEcho& prompt, int32_t top_logprobs) {
  std::vector<engine::TokenInfo> tokens = prompt.tokens;
  const auto keep = static_cast<size_t>(std::max(top_logprobs, 0));
  for (engine::TokenInfo& token : tokens) {
    if (token.top_logprobs.size() > keep) token.top_logprobs.resize(keep);
  }
  return tokens;
}

std::optional<std::string> prompt_chunk_json(const ResponseIdentity& identity,
                                             const engine::PromptEcho& prompt, int32_t index,
                                             const EchoOptions& echo, LogprobsOutput logprobs,
                                             const TokenTextFn& token_text) {
  if (!echo.echo && !echo.prompt_logprobs) return std::nullopt;
  ChunkContent content;
  content.index = index;
  std::vector<engine::TokenInfo> tokens;
  if (echo.echo) {
    content.text = prompt.text;
    tokens = echoed_tokens(prompt, echo.top_logprobs);
    content.tokens = tokens;
    content.logprobs = logprobs;
  }
  if (echo.prompt_logprobs) {
    content.prompt_logprobs = &prompt;
    content.prompt_logprobs_n = *echo.prompt_logprobs;
  }
  return chunk_json(identity, content, /*first=*/true, std::nullopt, token_text);
}

std::string usage_chunk_json(const ResponseIdentity& identity, const engine::Usage& usage) {
  JsonWriter w;
  w.begin_object();
  write_head(w, identity, true);
  w.key("choices").begin_array().end_array();
  write_usage(w, usage);
  w.end_object();
  return w.take();
}

std::string completion_json(const ResponseIdentity& identity, const ChunkContent& content,
                            const engine::Completion& completion, const TokenTextFn& token_text) {
  const ChoiceOutput choice{content, completion.finish_reason};
  return multi_completion_json(identity, std::span(&choice, 1), completion.usage, token_text,
                               completion.kv_transfer ? &*completion.kv_transfer : nullptr);
}

CollectedChoices::Choice& CollectedChoices::at(int32_t index) {
  const auto i = static_cast<size_t>(index < 0 ? 0 : index);
  if (i >= choices_.size()) choices_.resize(i + 1);
  return choices_[i];
}

void CollectedChoices::add(engine::TokenDelta& delta) {
  Choice& choice = at(delta.index);
  if (delta.prompt) {
    // The choice's first delta: its prompt comes before anything generated.
    if (echo_.echo) {
      choice.text.insert(0, delta.prompt->text);
      if (logprobs_ != LogprobsOutput::kNone) {
        std::vector<engine::TokenInfo> tokens = echoed_tokens(*delta.prompt, echo_.top_logprobs);
        choice.tokens.insert(choice.tokens.begin(), std::make_move_iterator(tokens.begin()),
                             std::make_move_iterator(tokens.end()));
      }
    }
    if (echo_.prompt_logprobs) choice.prompt = std::move(delta.prompt);
  }
  choice.text += delta.text;
  if (logprobs_ == LogprobsOutput::kNone) return;
  for (auto& token : delta.tokens) choice.tokens.push_back(std::move(token));
}

void CollectedChoices::end(const engine::ChoiceEnd& end) { at(end.index).finish_reason = end.finish_reason; }

std::string CollectedChoices::body_json(const ResponseIdentity& identity,
                                        const engine::Completion& completion,
                                        const TokenTextFn& token_text) const {
  std::vector<ChoiceOutput> outputs;
  outputs.reserve(choices_.size());
  std::vector<ToolCallAnswer> answers(choices_.size());  // outlives `outputs`, which view it
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& choice = choices_[i];
    ChunkContent content{choice.text, choice.tokens, logprobs_, 0};
    content.index = static_cast<int32_t>(i);
    if (choice.prompt && echo_.prompt_logprobs) {
      content.prompt_logprobs = &*choice.prompt;
      content.prompt_logprobs_n = *echo_.prompt_logprobs;
    }
    std::string_view finish_reason = choice.finish_reason.empty()
                                         ? std::string_view(completion.finish_reason)
                                         : std::string_view(choice.finish_reason);
    if (tool_format_ != model::ToolCallFormat::kNone) {
      answers[i] = parse_tool_call_answer(tool_format_, choice.text);
      if (!answers[i].calls.empty()) {
        content.text = answers[i].content;
        content.tool_calls = answers[i].calls;
        finish_reason = finish_reason_with_calls(finish_reason, true);
      }
    }
    outputs.push_back(ChoiceOutput{content, finish_reason});
  }
  return multi_completion_json(identity, outputs, completion.usage, token_text,
                               completion.kv_transfer ? &*completion.kv_transfer : nullptr);
}

std::string multi_completion_json(const ResponseIdentity& identity,
                                  std::span<const ChoiceOutput> choices, const engine::Usage& usage,
                                  const TokenTextFn& token_text,
                                  const disagg::KvTransferParams* kv_transfer) {
  JsonWriter w;
  w.begin_object();
  write_head(w, identity, false);
  w.key("choices").begin_array();
  for (const ChoiceOutput& choice : choices) {
    const ChunkContent& content = choice.content;
    w.begin_object().field("index", content.index);
    switch (identity.kind) {
      case ApiKind::kChat:
        w.key("message").begin_object().field("role", "assistant");
        if (content.tool_calls.empty() || !content.text.empty()) {
          w.field("content", content.text);
        } else {
          w.key("content").null();
        }
        if (!content.tool_calls.empty()) write_tool_calls(w, content.tool_calls, /*stream=*/false);
        w.end_object();
        break;
      case ApiKind::kCompletion: w.field("text", content.text); break;
    }
    write_logprobs(w, identity.kind, content, token_text);
    write_finish_reason(w, choice.finish_reason);
    if (content.prompt_logprobs && identity.kind == ApiKind::kCompletion) {
      write_prompt_logprobs(w, *content.prompt_logprobs, content.prompt_logprobs_n, token_text);
    }
    w.end_object();
  }
  w.end_array();
  // Chat: one list for the request (every choice shares the prompt), as vLLM answers.
  if (identity.kind == ApiKind::kChat && !choices.empty() && choices.front().content.prompt_logprobs) {
    const ChunkContent& first = choices.front().content;
    write_prompt_logprobs(w, *first.prompt_logprobs, first.prompt_logprobs_n, token_text);
  }
  write_usage(w, usage);
  if (kv_transfer != nullptr) {
    w.key("kv_transfer_params");
    write_kv_transfer_params(w, *kv_transfer);
  }
  w.end_object();
  return w.take();
}

std::string error_json(const ApiError& error) { return error_response(error).body; }

}  // namespace troupe::net
