// Fuzzes the OpenAI request decoder (net/openai_request.*): POST /v1/chat/completions and
// /v1/completions bodies, the WebSocket chat message and every /v1/batch item go through it.
// Input: one selector byte (bit 0: chat or completion; bit 1: n > 1 allowed), then the body.
// Properties beyond "no crash, no UB, no leak":
//   - an error is a 400 or a 404 with a message, and its response body is valid JSON;
//   - an accepted request already satisfies what ingress re-checks without the vocabulary
//     (PromptBuilder::check_sampling): a request net accepts must not bounce off the engine;
//   - accepted text (messages, prompt, stop strings) is valid UTF-8 and non-empty where needed.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "net/http_types.hpp"
#include "net/json_input.hpp"
#include "net/openai_request.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace troupe;

namespace {

void check_accepted(const net::CompletionRequest& request, const net::OpenAiApiConfig& config) {
  const engine::GenerateRequest& g = request.generate;
  const model::SamplingParams& s = g.sampling;
  // Mirrors PromptBuilder::check_sampling (actors/ingress/prompt_builder.cpp), in float.
  TROUPE_FUZZ_CHECK(s.temperature >= 0.0f && s.temperature <= 2.0f, "temperature %g", s.temperature);
  TROUPE_FUZZ_CHECK(s.top_p > 0.0f && s.top_p <= 1.0f, "top_p %g", s.top_p);
  TROUPE_FUZZ_CHECK(s.min_p >= 0.0f && s.min_p <= 1.0f, "min_p %g", s.min_p);
  TROUPE_FUZZ_CHECK(s.top_k >= 0, "top_k %d", s.top_k);
  TROUPE_FUZZ_CHECK(s.repetition_penalty > 0.0f && s.repetition_penalty <= 10.0f,
                    "repetition_penalty %g", s.repetition_penalty);
  TROUPE_FUZZ_CHECK(s.presence_penalty >= -2.0f && s.presence_penalty <= 2.0f,
                    "presence_penalty %g", s.presence_penalty);
  TROUPE_FUZZ_CHECK(s.frequency_penalty >= -2.0f && s.frequency_penalty <= 2.0f,
                    "frequency_penalty %g", s.frequency_penalty);
  TROUPE_FUZZ_CHECK(s.top_logprobs >= 0 && s.top_logprobs <= config.max_top_logprobs,
                    "top_logprobs %d", s.top_logprobs);
  TROUPE_FUZZ_CHECK(!model::check_logit_bias(s.logit_bias, INT32_MAX), "logit_bias not canonical");
  TROUPE_FUZZ_CHECK(s.logit_bias.size() <= static_cast<size_t>(config.max_logit_bias_entries),
                    "%zu logit_bias entries", s.logit_bias.size());
  TROUPE_FUZZ_CHECK(g.stop.max_tokens >= 1, "max_tokens %d", g.stop.max_tokens);
  TROUPE_FUZZ_CHECK(s.min_tokens >= 0 && s.min_tokens <= g.stop.max_tokens, "min_tokens %d",
                    s.min_tokens);
  TROUPE_FUZZ_CHECK(g.stop.stop_strings.size() <= static_cast<size_t>(config.max_stop_strings),
                    "%zu stop strings", g.stop.stop_strings.size());
  for (const std::string& stop : g.stop.stop_strings) {
    TROUPE_FUZZ_CHECK(!stop.empty() && !net::first_invalid_utf8(stop), "bad stop string");
  }
  for (const int32_t id : g.stop.stop_token_ids) TROUPE_FUZZ_CHECK(id >= 0, "stop id %d", id);
  TROUPE_FUZZ_CHECK(request.n >= 1 && request.n <= config.max_n, "n %d", request.n);
  TROUPE_FUZZ_CHECK(request.generate.n == request.n, "generate.n %d", request.generate.n);
  TROUPE_FUZZ_CHECK(request.include_usage <= request.stream, "include_usage without stream");

  if (request.kind == net::ApiKind::kChat) {
    TROUPE_FUZZ_CHECK(!g.messages.empty(), "no messages");
    TROUPE_FUZZ_CHECK(!g.prompt_text && g.prompt_token_ids.empty(), "chat with a prompt");
    for (const model::ChatMessage& m : g.messages) {
      TROUPE_FUZZ_CHECK(!m.role.empty(), "empty role");
      TROUPE_FUZZ_CHECK(!net::first_invalid_utf8(m.role), "role is not UTF-8");
      TROUPE_FUZZ_CHECK(!net::first_invalid_utf8(m.content), "content is not UTF-8");
    }
  } else {
    TROUPE_FUZZ_CHECK(g.messages.empty(), "completion with messages");
    TROUPE_FUZZ_CHECK(g.prompt_text.has_value() != !g.prompt_token_ids.empty(),
                      "exactly one of prompt text and prompt ids");
    if (g.prompt_text) {
      TROUPE_FUZZ_CHECK(!g.prompt_text->empty(), "empty prompt");
      TROUPE_FUZZ_CHECK(!net::first_invalid_utf8(*g.prompt_text), "prompt is not UTF-8");
    }
    for (const int32_t id : g.prompt_token_ids) TROUPE_FUZZ_CHECK(id >= 0, "prompt id %d", id);
  }
}

// One input, checked; LLVMFuzzerTestOneInput below also bounds its CPU time.
void fuzz_one(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const uint8_t selector = data[0];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto kind = (selector & 1) ? net::ApiKind::kCompletion : net::ApiKind::kChat;
  const net::OpenAiApiConfig config;

  net::ParsedCompletion parsed =
      net::parse_completion_request(kind, body, "smollm2", config);
  if (const auto* error = std::get_if<net::ApiError>(&parsed)) {
    TROUPE_FUZZ_CHECK(error->status == 400 || error->status == 404, "status %d", error->status);
    TROUPE_FUZZ_CHECK(!error->message.empty(), "empty error message");
    TROUPE_FUZZ_CHECK(!error->code.empty(), "error without a code");
    const net::HttpResponse response = net::error_response(*error);
    TROUPE_FUZZ_CHECK(fuzz::is_valid_json(response.body), "error body is not JSON: %s",
                      response.body.c_str());
  } else {
    const auto& request = std::get<net::CompletionRequest>(parsed);
    TROUPE_FUZZ_CHECK(request.kind == kind, "kind changed");
    check_accepted(request, config);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::within_cpu_budget("parse_completion_request", size, 5.0, 50.0, [&] { fuzz_one(data, size); });
  return 0;
}
