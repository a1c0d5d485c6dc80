#include "net/openai_routes.hpp"

#include <chrono>

#include <fmt/format.h>
#include <simdjson.h>

#include "net/disagg_codec.hpp"
#include "model/tokenizer.hpp"
#include "net/client_key.hpp"
#include "net/batch_runner.hpp"
#include "net/json_input.hpp"
#include "net/json_writer.hpp"
#include "net/metrics.hpp"
#include "net/openai_embeddings.hpp"
#include "net/openai_sink.hpp"

namespace troupe::net {
namespace {

namespace dom = simdjson::dom;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void handle_completion(const std::shared_ptr<OpenAiContext>& context, ApiKind kind,
                       const HttpRequest& request, const std::shared_ptr<ResponseStream>& out) {
  const std::string route(request.path());
  ParsedCompletion parsed = parse_completion_request(kind, request.body, context->state.model.id,
                                                     context->config);
  if (auto* error = std::get_if<ApiError>(&parsed)) {
    context->record(route, "-", {}, request.api_key_name)->fail(*error);
    out->respond(error_response(*error));
    return;
  }
  if (auto refused = context->admit(request.api_key_name, out.get())) {
    context->record(route, "-", {}, request.api_key_name)->fail(*refused);
    out->respond(error_response(*refused));
    return;
  }
  CompletionRequest& completion = std::get<CompletionRequest>(parsed);
  completion.generate.client = client_key(request.api_key_name, request.header("Authorization"), completion.user,
                                          http_connection_label(request.connection_id));
  ResponseIdentity identity{kind, make_response_id(kind), unix_now(), context->state.model.id};
  SinkOptions options{route,
                      completion.stream,
                      completion.include_usage,
                      logprobs_output(completion),
                      context->tool_format(completion.generate),
                      echo_options(completion)};
  auto record = context->record(route, identity.id,
                                completion.n > 1 ? fmt::format("n={}", completion.n) : std::string(),
                                request.api_key_name, completion.generate.kind());
  auto sink = std::make_shared<CompletionSink>(context, out, std::move(identity), options,
                                               std::move(record), completion.n);
  const engine::RequestId id = context->engine.submit(std::move(completion.generate), sink);
  out->on_client_gone([context, id] { context->engine.cancel(id); });
}

struct JsonBody {
  dom::parser parser;
  dom::element root;
};

// Parses a small JSON object body (tokenize/detokenize); nullopt error on success.
std::optional<ApiError> parse_object(const HttpRequest& request, JsonBody& body) {
  if (const auto error = body.parser.parse(simdjson::padded_string(request.body)).get(body.root)) {
    return ApiError{400, describe_bad_json(request.body, simdjson::error_message(error)),
                    "invalid_request_error", "", "invalid_json"};
  }
  if (!body.root.is_object()) {
    return ApiError{400, "The request body must be a JSON object.", "invalid_request_error", "",
                    "invalid_json"};
  }
  return std::nullopt;
}

HttpResponse handle_tokenize(const OpenAiContext& context, const HttpRequest& request) {
  JsonBody body;
  if (auto error = parse_object(request, body)) return error_response(*error);
  const dom::object object(body.root);
  // "prompt" as vLLM names it, "content" as llama.cpp's server does.
  std::string_view prompt;
  const bool by_content =
      object["prompt"].error() != simdjson::SUCCESS && object["content"].error() == simdjson::SUCCESS;
  const char* const field = by_content ? "content" : "prompt";
  if (object[field].get(prompt) != simdjson::SUCCESS) {
    return error_response(400, "'prompt' (or 'content'), a string, is required.",
                          "invalid_request_error", field, "invalid_type");
  }
  bool add_special = true;
  if (auto e = object["add_special_tokens"]; e.error() == simdjson::SUCCESS) {
    if (e.get(add_special) != simdjson::SUCCESS) {
      return error_response(400, "Invalid type for 'add_special_tokens': expected a boolean.",
                            "invalid_request_error", "add_special_tokens", "invalid_type");
    }
  }
  const model::Tokenizer& tokenizer = context.engine.tokenizer();
  std::vector<int32_t> ids;
  if (add_special && tokenizer.add_bos() && tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
  const std::vector<int32_t> encoded = tokenizer.encode(prompt, false);
  ids.insert(ids.end(), encoded.begin(), encoded.end());
  JsonWriter w;
  w.begin_object().field("count", static_cast<uint64_t>(ids.size()));
  w.field("max_model_len", context.state.model.context_length).key("tokens").begin_array();
  for (const int32_t id : ids) w.value(id);
  w.end_array().end_object();
  return json_response(200, w.take());
}

HttpResponse handle_detokenize(const OpenAiContext& context, const HttpRequest& request) {
  JsonBody body;
  if (auto error = parse_object(request, body)) return error_response(*error);
  dom::array tokens;
  if (dom::object(body.root)["tokens"].get(tokens) != simdjson::SUCCESS) {
    return error_response(400, "'tokens' (an array of token ids) is required.",
                          "invalid_request_error", "tokens", "invalid_type");
  }
  const model::Tokenizer& tokenizer = context.engine.tokenizer();
  std::vector<int32_t> ids;
  for (dom::element token : tokens) {
    int64_t id = 0;
    if (token.get(id) != simdjson::SUCCESS) {
      return error_response(400, "Invalid type for 'tokens': expected an array of integers.",
                            "invalid_request_error", "tokens", "invalid_type");
    }
    if (id < 0 || static_cast<uint64_t>(id) >= tokenizer.vocab_size()) {
      return error_response(400, fmt::format("Token id {} is outside the vocabulary (size {}).",
                                             id, tokenizer.vocab_size()),
                            "invalid_request_error", "tokens", "invalid_value");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  JsonWriter w;
  w.begin_object().field("prompt", tokenizer.decode(ids)).end_object();
  return json_response(200, w.take());
}

// Disaggregated prefill/decode: the handshake a decode server makes before pulling KV.
HttpResponse handle_kv_metadata(const OpenAiContext& context) {
  const std::optional<disagg::KvMetadata> metadata = context.engine.kv_metadata();
  if (!metadata) {
    return error_response(404, "This server moves no KV (disagg.role is combined).",
                          "invalid_request_error", "", "kv_transfer_disabled");
  }
  return json_response(200, kv_metadata_json(*metadata));
}

// A decode server is done with a held request's KV (or gives up on it).
HttpResponse handle_kv_release(const OpenAiContext& context, const HttpRequest& request) {
  JsonBody body;
  if (auto error = parse_object(request, body)) return error_response(*error);
  std::string_view id;
  if (dom::object(body.root)["remote_request_id"].get(id) != simdjson::SUCCESS) {
    return error_response(400, "'remote_request_id' (a string) is required.",
                          "invalid_request_error", "remote_request_id", "invalid_type");
  }
  JsonWriter w;
  w.begin_object().field("released", context.engine.release_kv_lease(id)).end_object();
  return json_response(200, w.take());
}

HttpResponse handle_metrics(const OpenAiContext& context) {
  HttpResponse response;
  response.content_type = "text/plain; version=0.0.4; charset=utf-8";
  response.body = render_metrics(context.engine.stats(), *context.metrics, context.state.model.id,
                                 context.state.connections.get());
  return response;
}

}  // namespace

Router::AsyncHandler on_engine_worker(engine::Engine& engine,
                                      std::function<HttpResponse(const HttpRequest&)> handler) {
  return [&engine, handler = std::move(handler)](HttpRequest request, std::shared_ptr<ResponseStream> out) {
    engine.post_tokenizer_work([handler, request = std::move(request), out = std::move(out)] {
      if (out->client_gone()) return;  // nobody to answer: skip the work
      out->respond(handler(request));
    });
  };
}

std::shared_ptr<OpenAiContext> add_openai_routes(Router& router, engine::Engine& engine,
                                                 const ServerState& state,
                                                 const OpenAiApiConfig& config,
                                                 std::shared_ptr<ServingMetrics> metrics) {
  if (!metrics) metrics = std::make_shared<ServingMetrics>();
  auto context = std::make_shared<OpenAiContext>(engine, state, config, std::move(metrics));
  router.add_async("POST", "/v1/chat/completions",
                   [context](HttpRequest request, std::shared_ptr<ResponseStream> out) {
                     handle_completion(context, ApiKind::kChat, request, out);
                   });
  router.add_async("POST", "/v1/completions",
                   [context](HttpRequest request, std::shared_ptr<ResponseStream> out) {
                     handle_completion(context, ApiKind::kCompletion, request, out);
                   });
  router.add_async("POST", "/v1/embeddings",
                   [context](HttpRequest request, std::shared_ptr<ResponseStream> out) {
                     handle_embeddings(context, request, out);
                   });
  router.add_async("POST", "/v1/batch",
                   [context](HttpRequest request, std::shared_ptr<ResponseStream> out) {
                     handle_batch(context, request, out);
                   });
  // Tokenizing megabytes takes seconds: the engine's tokenizer thread does it, never an io
  // thread (which would stall every other client of that thread, /health included).
  router.add_async("POST", "/tokenize", on_engine_worker(engine, [context](const HttpRequest& r) {
                     return handle_tokenize(*context, r);
                   }));
  router.add_async("POST", "/detokenize", on_engine_worker(engine, [context](const HttpRequest& r) {
                     return handle_detokenize(*context, r);
                   }));
  router.add("GET", "/metrics", [context](const HttpRequest&) { return handle_metrics(*context); });
  router.add("GET", "/v1/kv/metadata", [context](const HttpRequest&) { return handle_kv_metadata(*context); });
  // The release waits for the kv-cache actor's answer: off the io thread, like /tokenize.
  router.add_async("POST", "/v1/kv/release", on_engine_worker(engine, [context](const HttpRequest& r) {
                     return handle_kv_release(*context, r);
                   }));
  return context;
}

}  // namespace troupe::net
