// NOTE: every reader below treats an absent field and an explicit `null` alike (OpenAI clients
// send nulls for unset options), and names the field in its error's `param`.
#include "net/openai_request.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <simdjson.h>

#include "net/disagg_codec.hpp"
#include "net/json_input.hpp"
#include "net/openai_field_errors.hpp"
#include "net/openai_structured_output.hpp"
#include "net/openai_tools.hpp"

namespace troupe::net {
namespace {

namespace dom = simdjson::dom;
using Error = std::optional<ApiError>;
using openai_fields::bad_type;
using openai_fields::field;
using openai_fields::as_integer;
using openai_fields::check_text;
using openai_fields::invalid;
using openai_fields::read_string;

std::optional<double> as_number(dom::element e) {
  switch (e.type()) {
    case dom::element_type::INT64: return static_cast<double>(int64_t(e));
    case dom::element_type::UINT64: return static_cast<double>(uint64_t(e));
    case dom::element_type::DOUBLE: return double(e);
    default: return std::nullopt;
  }
}

struct Range {
  double low;
  double high;
  bool low_open = false;
};

Error read_float(dom::object o, std::string_view key, Range range, float& out) {
  const auto e = field(o, key);
  if (!e) return std::nullopt;
  const auto v = as_number(*e);
  if (!v) return bad_type(key, "a number");
  const bool too_low = range.low_open ? *v <= range.low : *v < range.low;
  // NOTE: an open bound holds for the float the engine gets too: 1e-50 is above 0 as a double
  // but rounds to 0.0f (found by tests/fuzz/openai_request_fuzz). The cast runs only once the
  // value is known to be in range, so it cannot overflow.
  if (too_low || *v > range.high || !std::isfinite(*v) ||
      (range.low_open && static_cast<float>(*v) <= range.low)) {
    return invalid(std::string(key),
                   fmt::format("Invalid value for '{}': {} is outside the range {}{}, {}].", key,
                               *v, range.low_open ? "(" : "[", range.low, range.high));
  }
  out = static_cast<float>(*v);
  return std::nullopt;
}

Error read_int(dom::object o, std::string_view key, int64_t low, int64_t high,
               std::optional<int64_t>& out) {
  const auto e = field(o, key);
  if (!e) return std::nullopt;
  const auto v = as_integer(*e);
  if (!v) return bad_type(key, "an integer");
  if (*v < low || *v > high) {
    return invalid(std::string(key), fmt::format("Invalid value for '{}': {} is outside the "
                                                 "range [{}, {}].", key, *v, low, high));
  }
  out = *v;
  return std::nullopt;
}

Error read_bool(dom::object o, std::string_view key, bool& out) {
  const auto e = field(o, key);
  if (!e) return std::nullopt;
  if (!e->is_bool()) return bad_type(key, "a boolean");
  out = bool(*e);
  return std::nullopt;
}

// `content`: a string, or a list of {"type":"text","text":...} parts (concatenated).
Error read_content(dom::element e, const std::string& param, std::string& out) {
  if (e.is_string()) {
    out = std::string(std::string_view(e));
    return check_text(param, out);
  }
  if (!e.is_array()) return bad_type(param, "a string or an array of content parts");
  size_t index = 0;
  for (dom::element part : dom::array(e)) {
    const std::string part_param = fmt::format("{}[{}]", param, index++);
    if (!part.is_object()) return bad_type(part_param, "a content part object");
    std::string type;
    std::string text;
    if (auto err = read_string(dom::object(part), "type", type)) return err;
    if (type != "text") {
      return invalid(part_param + ".type",
                     fmt::format("Content part type '{}' is not supported (only 'text').", type));
    }
    if (!field(dom::object(part), "text")) {
      return invalid(part_param + ".text", "A 'text' content part needs 'text' (a string).",
                     "missing_required_parameter");
    }
    if (auto err = read_string(dom::object(part), "text", text)) return err;
    out += text;
  }
  return check_text(param, out);
}

// OpenAI's roles; anything else is a 400, as OpenAI answers (vLLM passes unknown roles to the
// chat template, where they would render as turns the model was never trained on).
constexpr std::string_view kRoles[] = {"system", "developer", "user", "assistant", "tool",
                                       "function"};

// `content` must be present and not null, except on an assistant message that carries
// `tool_calls` or `function_call` (OpenAI's rule: the call is the message's content then).
Error read_message(dom::object item, const std::string& param, model::ChatMessage& message) {
  const auto role = field(item, "role");
  if (!role) {
    return invalid(param + ".role", "'role' is a required property.", "missing_required_parameter");
  }
  if (!role->is_string()) return bad_type(param + ".role", "a string");
  message.role = std::string(std::string_view(*role));
  if (std::find(std::begin(kRoles), std::end(kRoles), message.role) == std::end(kRoles)) {
    return invalid(param + ".role",
                   fmt::format("Invalid value for '{}.role': '{}' is not one of 'system', "
                               "'developer', 'user', 'assistant', 'tool', 'function'.",
                               param, message.role));
  }
  if (auto err = read_message_tool_fields(item, param, message)) return err;
  const auto content = field(item, "content");
  if (!content) {
    const bool calls = field(item, "tool_calls") || field(item, "function_call");
    if (message.role == "assistant" && calls) return std::nullopt;
    return invalid(param + ".content",
                   fmt::format("'content' is required (a string or an array of text parts) on a "
                               "'{}' message{}.",
                               message.role,
                               message.role == "assistant" ? " without tool_calls" : ""),
                   "missing_required_parameter");
  }
  return read_content(*content, param + ".content", message.content);
}

Error read_messages(dom::object o, std::vector<model::ChatMessage>& out) {
  const auto e = field(o, "messages");
  if (!e) return invalid("messages", "'messages' is a required property.", "missing_required_parameter");
  if (!e->is_array()) return bad_type("messages", "an array");
  size_t index = 0;
  for (dom::element item : dom::array(*e)) {
    const std::string param = fmt::format("messages[{}]", index++);
    if (!item.is_object()) return bad_type(param, "an object");
    model::ChatMessage message;
    if (auto err = read_message(dom::object(item), param, message)) return err;
    out.push_back(std::move(message));
  }
  if (out.empty()) return invalid("messages", "'messages' must contain at least one message.");
  return std::nullopt;
}

Error read_token_ids(dom::array array, std::string_view param, std::vector<int32_t>& out) {
  for (dom::element id : array) {
    const auto v = as_integer(id);
    if (!v) return bad_type(param, "an array of token ids (integers)");
    if (*v < 0 || *v > std::numeric_limits<int32_t>::max()) {
      return invalid(std::string(param), fmt::format("Token id {} is out of range.", *v));
    }
    out.push_back(static_cast<int32_t>(*v));
  }
  return std::nullopt;
}

// `prompt`: a string, a list of one string, a list of token ids or a list of one such list.
Error read_prompt(dom::object o, engine::GenerateRequest& out) {
  const auto e = field(o, "prompt");
  if (!e) return invalid("prompt", "'prompt' is a required property.", "missing_required_parameter");
  constexpr std::string_view kExpected = "a string, an array of strings or an array of token ids";
  if (e->is_string()) {
    out.prompt_text = std::string(std::string_view(*e));
  } else if (e->is_array()) {
    const dom::array items(*e);
    if (items.size() == 0) return invalid("prompt", "'prompt' must not be empty.");
    const dom::element first = items.at(0);
    if (first.is_string() || first.is_array()) {
      if (items.size() > 1) {
        return invalid("prompt", "Only one prompt per request is supported (n must be 1).");
      }
      if (first.is_string()) {
        out.prompt_text = std::string(std::string_view(first));
      } else if (auto err = read_token_ids(dom::array(first), "prompt", out.prompt_token_ids)) {
        return err;
      }
    } else if (auto err = read_token_ids(items, "prompt", out.prompt_token_ids)) {
      return err;
    }
  } else {
    return bad_type("prompt", kExpected);
  }
  if (out.prompt_text) {
    if (out.prompt_text->empty()) return invalid("prompt", "'prompt' must not be empty.");
    return check_text("prompt", *out.prompt_text);
  }
  if (out.prompt_token_ids.empty()) return invalid("prompt", "'prompt' must not be empty.");
  return std::nullopt;
}

Error read_stop(dom::object o, const OpenAiApiConfig& config, model::StopConditions& stop) {
  const auto e = field(o, "stop");
  if (e) {
    if (e->is_string()) {
      const std::string_view text(*e);
      if (!text.empty()) stop.stop_strings.emplace_back(text);
    } else if (e->is_array()) {
      const dom::array items(*e);
      if (items.size() > static_cast<size_t>(config.max_stop_strings)) {
        return invalid("stop", fmt::format("'stop' may hold at most {} strings.",
                                           config.max_stop_strings));
      }
      for (dom::element item : items) {
        if (!item.is_string()) return bad_type("stop", "a string or an array of strings");
        const std::string_view text(item);
        if (!text.empty()) stop.stop_strings.emplace_back(text);
      }
    } else {
      return bad_type("stop", "a string or an array of strings");
    }
  }
  for (const std::string& text : stop.stop_strings) {
    if (auto err = check_text("stop", text)) return err;
  }
  if (const auto ids = field(o, "stop_token_ids")) {
    if (!ids->is_array()) return bad_type("stop_token_ids", "an array of integers");
    return read_token_ids(dom::array(*ids), "stop_token_ids", stop.stop_token_ids);
  }
  return std::nullopt;
}

Error read_sampling(dom::object o, model::SamplingParams& s) {
  if (auto err = read_float(o, "temperature", {0, 2}, s.temperature)) return err;
  if (auto err = read_float(o, "top_p", {0, 1, true}, s.top_p)) return err;
  if (auto err = read_float(o, "min_p", {0, 1}, s.min_p)) return err;
  if (auto err = read_float(o, "presence_penalty", {-2, 2}, s.presence_penalty)) return err;
  if (auto err = read_float(o, "frequency_penalty", {-2, 2}, s.frequency_penalty)) return err;
  if (auto err = read_float(o, "repetition_penalty", {0, 10, true}, s.repetition_penalty)) {
    return err;
  }
  std::optional<int64_t> top_k;
  if (auto err = read_int(o, "top_k", -1, std::numeric_limits<int32_t>::max(), top_k)) return err;
  if (top_k) s.top_k = static_cast<int32_t>(std::max<int64_t>(0, *top_k));
  if (const auto seed = field(o, "seed")) {
    if (seed->type() == dom::element_type::INT64) {
      s.seed = static_cast<uint64_t>(int64_t(*seed));
    } else if (seed->type() == dom::element_type::UINT64) {
      s.seed = uint64_t(*seed);
    } else {
      return bad_type("seed", "an integer");
    }
  }
  return std::nullopt;
}

// A logit_bias key: a decimal token id ("15339"), nothing else (no sign, spaces or exponent).
std::optional<int32_t> parse_token_id_key(std::string_view key) {
  int32_t id = 0;
  const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
  if (ec != std::errc() || end != key.data() + key.size() || key.empty() || key[0] == '-') {
    return std::nullopt;
  }
  return id;
}

// `logit_bias`: {"<token id>": bias, ...}. The vocabulary bound is checked at admission
// (PromptBuilder knows the tokenizer); here every id only has to be a non-negative int32.
Error read_logit_bias(dom::object o, const OpenAiApiConfig& config, model::SamplingParams& s) {
  const auto e = field(o, "logit_bias");
  if (!e) return std::nullopt;
  if (!e->is_object()) return bad_type("logit_bias", "an object mapping token ids to numbers");
  const dom::object entries(*e);
  if (entries.size() > static_cast<size_t>(config.max_logit_bias_entries)) {
    return invalid("logit_bias", fmt::format("'logit_bias' may hold at most {} entries.",
                                             config.max_logit_bias_entries));
  }
  for (const dom::key_value_pair entry : entries) {
    const auto id = parse_token_id_key(entry.key);
    if (!id) {
      return invalid("logit_bias", fmt::format("Invalid key in 'logit_bias': '{}' is not a token "
                                               "id (a non-negative integer).", entry.key));
    }
    const auto bias = as_number(entry.value);
    if (!bias) return bad_type("logit_bias", "an object mapping token ids to numbers");
    if (!(*bias >= -model::kMaxLogitBias && *bias <= model::kMaxLogitBias)) {
      return invalid("logit_bias", fmt::format("Invalid value in 'logit_bias' for token {}: {} is "
                                               "outside the range [-100, 100].", *id, *bias));
    }
    s.logit_bias.push_back({*id, static_cast<float>(*bias)});
  }
  std::sort(s.logit_bias.begin(), s.logit_bias.end(),
            [](const model::LogitBias& a, const model::LogitBias& b) { return a.token_id < b.token_id; });
  if (auto problem = model::check_logit_bias(s.logit_bias, std::numeric_limits<int32_t>::max())) {
    return invalid("logit_bias", fmt::format("Invalid 'logit_bias': {}.", *problem));
  }
  return std::nullopt;
}

// `min_tokens` (vLLM): at most max_tokens, so the request can finish.
Error read_min_tokens(dom::object o, engine::GenerateRequest& g) {
  std::optional<int64_t> min_tokens;
  if (auto err = read_int(o, "min_tokens", 0, std::numeric_limits<int32_t>::max(), min_tokens)) {
    return err;
  }
  if (!min_tokens) return std::nullopt;
  if (*min_tokens > g.stop.max_tokens) {
    return invalid("min_tokens", fmt::format("Invalid value for 'min_tokens': {} is greater than "
                                             "max_tokens ({}).", *min_tokens, g.stop.max_tokens));
  }
  g.sampling.min_tokens = static_cast<int32_t>(*min_tokens);
  return std::nullopt;
}

// Chat: `logprobs` (bool) + `top_logprobs`; completions: `logprobs` (the number of alternatives).
Error read_logprobs(dom::object o, ApiKind kind, const OpenAiApiConfig& config,
                    model::SamplingParams& s) {
  std::optional<int64_t> top;
  if (kind == ApiKind::kCompletion) {
    if (auto err = read_int(o, "logprobs", 0, config.max_top_logprobs, top)) return err;
    s.logprobs = top.has_value();
    s.top_logprobs = static_cast<int32_t>(top.value_or(0));
    return std::nullopt;
  }
  if (auto err = read_bool(o, "logprobs", s.logprobs)) return err;
  if (auto err = read_int(o, "top_logprobs", 0, config.max_top_logprobs, top)) return err;
  if (top && *top > 0 && !s.logprobs) {
    return invalid("top_logprobs", "'top_logprobs' requires 'logprobs' to be true.");
  }
  s.top_logprobs = static_cast<int32_t>(top.value_or(0));
  return std::nullopt;
}

// `n` choices: the engine runs them as one request (choice i samples with seed + i). Without a
// seed they start from a random one, so that asking again gives other choices.
Error read_n(dom::object o, const OpenAiApiConfig& config, CompletionRequest& request) {
  std::optional<int64_t> n;
  if (auto err = read_int(o, "n", std::numeric_limits<int64_t>::min(),
                          std::numeric_limits<int64_t>::max(), n)) {
    return err;
  }
  if (!n || *n == 1) return std::nullopt;
  if (*n < 1 || *n > config.max_n) {
    return invalid("n", fmt::format("Invalid value for 'n': {} is outside [1, {}].", *n, config.max_n));
  }
  request.n = static_cast<int32_t>(*n);
  request.generate.n = request.n;
  return std::nullopt;
}

uint64_t random_seed() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  return random();
}

// `max_tokens` as given goes to `max_tokens` (0 is checked with echo, read_prompt_outputs()).
Error read_limits(dom::object o, ApiKind kind, const OpenAiApiConfig& config,
                  engine::GenerateRequest& g, std::optional<int64_t>& max_tokens) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (auto err = read_int(o, "max_tokens", kind == ApiKind::kCompletion ? 0 : 1, kMax, max_tokens)) return err;
  if (kind == ApiKind::kChat) {
    if (auto err = read_int(o, "max_completion_tokens", 1, kMax, max_tokens)) return err;
  }
  g.stop.max_tokens = static_cast<int32_t>(max_tokens.value_or(config.default_max_tokens));
  if (auto err = read_bool(o, "ignore_eos", g.stop.ignore_eos)) return err;
  if (auto err = read_bool(o, "include_stop_str_in_output", g.include_stop_string_in_output)) {
    return err;
  }
  std::string priority;
  if (auto err = read_string(o, "priority", priority)) return err;
  if (!priority.empty()) {
    const auto parsed = parse_priority(priority);
    if (!parsed) {
      return invalid("priority", fmt::format("Invalid value for 'priority': '{}' is not one of "
                                             "low, normal, high, critical.", priority));
    }
    g.priority = *parsed;
  }
  return std::nullopt;
}

// `echo` (completions) and vLLM's `prompt_logprobs` (both APIs; null: off). The prompt is
// scored when either asks for logprobs; echo with `max_tokens: 0` scores without generating (what
// lm-evaluation-harness's log-likelihood requests send). After read_logprobs and read_limits.
Error read_prompt_outputs(dom::object o, ApiKind kind, const OpenAiApiConfig& config,
                          std::optional<int64_t> max_tokens, CompletionRequest& request) {
  engine::GenerateRequest& g = request.generate;
  if (kind == ApiKind::kCompletion) {
    if (auto err = read_bool(o, "echo", request.echo)) return err;
  }
  std::optional<int64_t> prompt_logprobs;
  if (const auto value = field(o, "prompt_logprobs"); value && !value->is_null()) {
    if (auto err = read_int(o, "prompt_logprobs", 0, config.max_top_logprobs, prompt_logprobs)) return err;
  }
  if (prompt_logprobs) request.prompt_logprobs = static_cast<int32_t>(*prompt_logprobs);
  g.echo = request.echo;
  if (request.echo && g.sampling.logprobs) g.prompt_logprobs = g.sampling.top_logprobs;
  if (request.prompt_logprobs) g.prompt_logprobs = std::max(g.prompt_logprobs, *request.prompt_logprobs);
  if (max_tokens && *max_tokens == 0) {
    if (!request.echo) {
      return invalid("max_tokens", "'max_tokens' must be at least 1 (0 is allowed only with "
                                   "'echo': true, which scores the prompt without generating).");
    }
    g.prompt_only = true;
    g.stop.max_tokens = 0;
  }
  return std::nullopt;
}

Error read_stream(dom::object o, CompletionRequest& request) {
  if (auto err = read_bool(o, "stream", request.stream)) return err;
  const auto options = field(o, "stream_options");
  if (!options) return std::nullopt;
  if (!options->is_object()) return bad_type("stream_options", "an object");
  if (!request.stream) {
    return invalid("stream_options", "'stream_options' is only allowed when 'stream' is true.");
  }
  return read_bool(dom::object(*options), "include_usage", request.include_usage);
}

// vLLM's disaggregated prefill/decode field (NixlConnector), null fields allowed as its proxies
// send them. The engine refuses it when this server moves no KV.
Error read_kv_transfer(dom::object o, CompletionRequest& request) {
  const std::optional<dom::element> value = field(o, "kv_transfer_params");
  if (!value || value->is_null()) return std::nullopt;
  if (!value->is_object()) return invalid("kv_transfer_params", "'kv_transfer_params' must be an object.");
  DisaggParsed<disagg::KvTransferParams> parsed = parse_kv_transfer_params(*value);
  if (const std::string* error = std::get_if<std::string>(&parsed)) return invalid("kv_transfer_params", *error);
  disagg::KvTransferParams params = std::get<disagg::KvTransferParams>(std::move(parsed));
  if (!params.do_remote_decode && !params.do_remote_prefill) return std::nullopt;
  if (request.n > 1) {
    return invalid("kv_transfer_params", "'kv_transfer_params' is not supported with n > 1.");
  }
  if (params.do_remote_decode && request.stream) {
    return invalid("kv_transfer_params",
                   "'kv_transfer_params.do_remote_decode' needs stream: false (the answer carries "
                   "the KV's whereabouts).");
  }
  request.generate.kv_transfer = std::move(params);
  return std::nullopt;
}

// Structured output with the fields it cannot honour (documented in the README):
// min_tokens could force text past the grammar's end (the mask then allows only the end tokens
// that min_tokens bans), and a P/D transfer would sample on another server without the mask.
Error check_structured_output(const engine::GenerateRequest& g) {
  if (g.prompt_only && (g.structured_output || g.kv_transfer)) {
    return invalid(g.structured_output ? g.structured_output_field : "kv_transfer_params",
                   fmt::format("'{}' cannot be combined with 'max_tokens': 0 (nothing is generated).",
                               g.structured_output ? g.structured_output_field : "kv_transfer_params"));
  }
  if (!g.structured_output) return std::nullopt;
  if (g.sampling.min_tokens > 0) {
    return invalid("min_tokens", fmt::format("'min_tokens' cannot be combined with '{}': the "
                                             "grammar decides where the output ends.",
                                             g.structured_output_field));
  }
  if (g.kv_transfer) {
    return invalid("kv_transfer_params", fmt::format("'kv_transfer_params' cannot be combined "
                                                     "with '{}'.", g.structured_output_field));
  }
  return std::nullopt;
}

Error read_request(dom::object o, ApiKind kind, std::string_view served_model_id,
                   const OpenAiApiConfig& config, CompletionRequest& request) {
  if (auto err = read_string(o, "model", request.model)) return err;
  if (auto err = openai_fields::unknown_model(request.model, served_model_id)) return err;
  engine::GenerateRequest& g = request.generate;
  if (auto err = kind == ApiKind::kChat ? read_messages(o, g.messages) : read_prompt(o, g)) {
    return err;
  }
  if (auto err = read_n(o, config, request)) return err;
  std::optional<int64_t> max_tokens;
  if (auto err = read_limits(o, kind, config, g, max_tokens)) return err;
  if (auto err = read_sampling(o, g.sampling)) return err;
  request.has_seed = field(o, "seed").has_value();
  if (request.n > 1 && !request.has_seed) g.sampling.seed = random_seed();
  if (auto err = read_logprobs(o, kind, config, g.sampling)) return err;
  if (auto err = read_prompt_outputs(o, kind, config, max_tokens, request)) return err;
  if (auto err = read_bool(o, "return_tokens_as_token_ids", request.return_tokens_as_token_ids))
    return err;
  if (auto err = read_logit_bias(o, config, g.sampling)) return err;
  if (auto err = read_min_tokens(o, g)) return err;  // after read_limits: needs max_tokens
  if (auto err = read_stop(o, config, g.stop)) return err;
  if (auto err = read_stream(o, request)) return err;
  if (auto err = read_string(o, "user", request.user)) return err;
  g.client_label = request.user;
  if (auto err = read_kv_transfer(o, request)) return err;
  if (auto err = read_tools(o, kind, g)) return err;
  if (auto err = read_structured_output(o, g)) return err;
  if (auto err = check_tools_combination(g)) return err;
  return check_structured_output(g);
}

}  // namespace

ParsedCompletion parse_completion_request(ApiKind kind, std::string_view body,
                                          std::string_view served_model_id,
                                          const OpenAiApiConfig& config) {
  thread_local dom::parser parser;
  const simdjson::padded_string padded(body);
  dom::element root;
  if (const auto error = parser.parse(padded).get(root)) {
    return invalid({}, describe_bad_json(body, simdjson::error_message(error)),
                   error == simdjson::UTF8_ERROR ? "invalid_utf8" : "invalid_json");
  }
  if (!root.is_object()) return invalid({}, "The request body must be a JSON object.", "invalid_json");
  CompletionRequest request;
  request.kind = kind;
  if (auto err =
          read_request(dom::object(root), kind, served_model_id, config, request)) {
    return *err;
  }
  return request;
}

ApiError api_error_from(const engine::RequestError& error) {
  ApiError e;
  e.message = error.message;
  e.param = error.param;
  switch (error.code) {
    case engine::ErrorCode::kInvalidRequest:
      e.status = 400;
      e.code = "invalid_value";
      break;
    case engine::ErrorCode::kPromptTooLong:
      e.status = 400;
      e.code = "context_length_exceeded";
      break;
    case engine::ErrorCode::kQueueFull:
      e.status = 429;
      e.type = "rate_limit_error";
      e.code = "queue_full";
      break;
    case engine::ErrorCode::kDraining:
      e.status = 503;
      e.type = "service_unavailable_error";
      e.code = "draining";
      break;
    case engine::ErrorCode::kInternal:
      e.status = 500;
      e.type = "server_error";
      e.code = "internal_error";
      break;
  }
  return e;
}

}  // namespace troupe::net
