// NOTE: as in openai_request.cpp, every reader treats an absent field and an explicit `null`
// alike (OpenAI clients send nulls for unset options) and names the field in its error's `param`.
#include "net/openai_embeddings.hpp"

#include <simdjson.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <limits>

#include <fmt/format.h>

#include "net/client_key.hpp"
#include "net/disagg_codec.hpp"
#include "net/json_input.hpp"
#include "net/json_writer.hpp"
#include "net/openai_field_errors.hpp"
#include "net/openai_sink.hpp"

namespace troupe::net {
namespace {

namespace dom = simdjson::dom;
using Error = std::optional<ApiError>;
using openai_fields::as_integer;
using openai_fields::bad_type;
using openai_fields::field;
using openai_fields::invalid;
using openai_fields::read_string;

constexpr std::string_view kRoute = "/v1/embeddings";

// Every field this route reads; anything else is refused by name.
constexpr std::string_view kKnownFields[] = {
    "input",   "model",     "encoding_format", "dimensions", "user",
    "pooling", "normalize", "embd_normalize",  "priority",
};

// A field that is not ours. A null one asks for nothing (see the NOTE above), so it passes.
Error check_fields(dom::object o) {
  for (const dom::key_value_pair entry : o) {
    if (std::find(std::begin(kKnownFields), std::end(kKnownFields), entry.key) !=
            std::end(kKnownFields) ||
        entry.value.is_null()) {
      continue;
    }
    return invalid(std::string(entry.key),
                   fmt::format("'{}' is not supported by {}.", entry.key, kRoute),
                   "unknown_parameter");
  }
  return std::nullopt;
}

// The 404 of parse_completion_request, for the same reason: one served model.
Error read_model(dom::object o, std::string_view served_model_id, std::string& model) {
  if (auto err = read_string(o, "model", model)) return err;
  return openai_fields::unknown_model(model, served_model_id);
}

Error read_text(dom::element e, const std::string& param,
                std::vector<engine::EmbeddingInput>& out) {
  std::string text{std::string_view(e)};
  if (text.empty()) return invalid(param, fmt::format("'{}' must not be an empty string.", param));
  // The tokenizer and the access log assume UTF-8, whatever escapes the JSON parser let through.
  if (auto err = openai_fields::check_text(param, text)) return err;
  out.push_back(engine::EmbeddingInput{.text = std::move(text), .token_ids = {}});
  return std::nullopt;
}

Error read_token_ids(dom::array array, const std::string& param,
                     std::vector<engine::EmbeddingInput>& out) {
  engine::EmbeddingInput input;
  for (dom::element id : array) {
    const auto v = as_integer(id);
    if (!v) return bad_type(param, "an array of token ids (integers)");
    if (*v < 0 || *v > std::numeric_limits<int32_t>::max()) {
      return invalid(param, fmt::format("Token id {} in '{}' is out of range.", *v, param));
    }
    input.token_ids.push_back(static_cast<int32_t>(*v));
  }
  if (input.token_ids.empty()) return invalid(param, fmt::format("'{}' must not be empty.", param));
  out.push_back(std::move(input));
  return std::nullopt;
}

// `input`: a string, an array of strings, an array of token ids (one input) or an array of such
// arrays. The first item decides which array form it is; a later item of another kind is a 400
// naming it.
Error read_inputs(dom::object o, const OpenAiApiConfig& config,
                  std::vector<engine::EmbeddingInput>& out) {
  const auto e = field(o, "input");
  if (!e) return invalid("input", "'input' is a required property.", "missing_required_parameter");
  if (e->is_string()) return read_text(*e, "input", out);
  if (!e->is_array()) {
    return bad_type("input",
                    "a string, an array of strings, an array of token ids or an array "
                    "of arrays of token ids");
  }
  const dom::array items(*e);
  if (items.size() == 0) return invalid("input", "'input' must not be an empty array.");
  const dom::element first = items.at(0);
  if (first.is_number()) return read_token_ids(items, "input", out);
  if (!first.is_string() && !first.is_array()) {
    return bad_type("input[0]", "a string, a token id or an array of token ids");
  }
  if (items.size() > static_cast<size_t>(config.max_embedding_inputs)) {
    return invalid("input", fmt::format("'input' holds {} inputs; at most {} are allowed.",
                                        items.size(), config.max_embedding_inputs));
  }
  out.reserve(items.size());
  size_t index = 0;
  for (dom::element item : items) {
    const std::string param = fmt::format("input[{}]", index++);
    if (first.is_string()) {
      if (!item.is_string()) return bad_type(param, "a string, as input[0] is");
      if (auto err = read_text(item, param, out)) return err;
    } else {
      if (!item.is_array()) return bad_type(param, "an array of token ids, as input[0] is");
      if (auto err = read_token_ids(dom::array(item), param, out)) return err;
    }
  }
  return std::nullopt;
}

// A string naming one of a closed set (`names` lists them for the 400); absent keeps `out`.
template <typename T, typename Parse>
Error read_named(dom::object o, std::string_view key, Parse parse, std::string_view names, T& out) {
  std::string name;
  if (auto err = read_string(o, key, name)) return err;
  if (name.empty()) return std::nullopt;
  const std::optional<T> parsed = parse(name);
  if (!parsed) {
    return invalid(std::string(key),
                   fmt::format("Invalid value for '{}': '{}' is not one of {}.", key, name, names));
  }
  out = *parsed;
  return std::nullopt;
}

std::optional<EmbeddingEncoding> encoding_from_string(std::string_view name) {
  if (name == "float") return EmbeddingEncoding::kFloat;
  if (name == "base64") return EmbeddingEncoding::kBase64;
  return std::nullopt;
}

// `dimensions`: only a Matryoshka-trained model keeps its meaning in a prefix of the vector, and
// a GGUF does not say whether it was trained so; the operator does. Its upper bound (the
// embedding length) is check_embedding_support's.
Error read_dimensions(dom::object o, const OpenAiApiConfig& config, std::optional<int32_t>& out) {
  const auto e = field(o, "dimensions");
  if (!e) return std::nullopt;
  const auto v = as_integer(*e);
  if (!v) return bad_type("dimensions", "an integer");
  if (!config.embedding_matryoshka) {
    return invalid("dimensions",
                   "'dimensions' is not enabled on this server: truncating an embedding keeps its "
                   "meaning only for a Matryoshka-trained model (the operator says so with "
                   "embeddings.matryoshka = true).",
                   "unsupported_parameter");
  }
  if (*v < 1 || *v > std::numeric_limits<int32_t>::max()) {
    return invalid("dimensions",
                   fmt::format("Invalid value for 'dimensions': {} is outside the range [1, {}].",
                               *v, std::numeric_limits<int32_t>::max()));
  }
  out = static_cast<int32_t>(*v);
  return std::nullopt;
}

// vLLM's `normalize` (a boolean) or llama.cpp's `embd_normalize` (a number), not both: two
// answers to one question would leave the result to our precedence rule.
Error read_norm(dom::object o, int32_t& norm) {
  const auto flag = field(o, "normalize");
  const auto number = field(o, "embd_normalize");
  if (flag && number) {
    return invalid("embd_normalize",
                   "'normalize' and 'embd_normalize' cannot both be given (use one).");
  }
  if (flag) {
    if (!flag->is_bool()) return bad_type("normalize", "a boolean");
    norm = bool(*flag) ? kEmbeddingNormEuclidean : kEmbeddingNormNone;
  } else if (number) {
    const auto v = as_integer(*number);
    if (!v) return bad_type("embd_normalize", "an integer");
    if (*v < kEmbeddingNormNone || *v > std::numeric_limits<int32_t>::max()) {
      return invalid("embd_normalize",
                     fmt::format("Invalid value for 'embd_normalize': {} is not -1 (none), 0 "
                                 "(max-abs), 1 (taxicab), 2 (euclidean) or a p-norm p > 2.",
                                 *v));
    }
    norm = static_cast<int32_t>(*v);
  }
  return std::nullopt;
}

Error read_request(dom::object o, std::string_view served_model_id, const OpenAiApiConfig& config,
                   EmbeddingRequest& request) {
  if (auto err = read_model(o, served_model_id, request.model)) return err;
  if (auto err = check_fields(o)) return err;
  engine::GenerateRequest& g = request.generate;
  engine::EmbeddingSpec spec{.pooling = config.embedding_pooling, .inputs = {}};
  if (auto err = read_inputs(o, config, spec.inputs)) return err;
  if (auto err = read_named(o, "pooling", model::pooling_from_string, "'mean', 'last', 'cls'",
                            spec.pooling)) {
    return err;
  }
  if (auto err = read_named(o, "encoding_format", encoding_from_string, "'float', 'base64'",
                            request.output.encoding)) {
    return err;
  }
  if (auto err = read_dimensions(o, config, request.output.dimensions)) return err;
  if (auto err = read_norm(o, request.output.norm)) return err;
  // As on the completion routes.
  if (auto err =
          read_named(o, "priority", parse_priority, "low, normal, high, critical", g.priority)) {
    return err;
  }
  if (auto err = read_string(o, "user", request.user)) return err;
  g.origin = engine::RequestOrigin::kHttp;
  g.client_label = request.user;
  g.n = static_cast<int32_t>(spec.inputs.size());
  g.embedding = std::move(spec);
  return std::nullopt;
}

// Shortest round-trip text of each float ("0.1", not the double 0.10000000149011612), in one
// buffer handed to JsonWriter::raw: a response can hold millions of numbers.
void append_float_array(std::span<const float> values, std::string& out) {
  out += '[';
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    // JSON has no NaN or infinity; JsonWriter writes them as null too.
    if (std::isfinite(values[i])) {
      fmt::format_to(std::back_inserter(out), "{}", values[i]);
    } else {
      out += "null";
    }
  }
  out += ']';
}

// Little-endian float32 bytes whatever the host's order: numpy's frombuffer(dtype=float32) on the
// client side reads them so.
std::string base64_of_floats(std::span<const float> values) {
  std::string bytes(values.size() * 4, '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    const auto bits = std::bit_cast<uint32_t>(values[i]);
    for (size_t b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<char>((bits >> (8 * b)) & 0xFF);
  }
  return base64_encode(bytes);
}

// Encoding more floats than this goes to the tokenizer thread: formatting takes ~30 ns a float,
// so 64K is ~2 ms on the ingress thread (which every stream's deltas wait on), while the largest
// request (2048 inputs of 4096) would hold it for a quarter of a second. Smaller answers stay
// inline so that a one-query embedding never waits behind a huge /tokenize.
constexpr size_t kInlineEncodeFloats = size_t{1} << 16;

}  // namespace

ParsedEmbedding parse_embedding_request(std::string_view body, std::string_view served_model_id,
                                        const OpenAiApiConfig& config) {
  thread_local dom::parser parser;
  const simdjson::padded_string padded(body);
  dom::element root;
  if (const auto error = parser.parse(padded).get(root)) {
    return invalid({}, describe_bad_json(body, simdjson::error_message(error)),
                   error == simdjson::UTF8_ERROR ? "invalid_utf8" : "invalid_json");
  }
  if (!root.is_object()) {
    return invalid({}, "The request body must be a JSON object.", "invalid_json");
  }
  EmbeddingRequest request;
  if (auto err = read_request(dom::object(root), served_model_id, config, request)) return *err;
  return request;
}

std::optional<ApiError> check_embedding_support(const EmbeddingRequest& request,
                                                const engine::ModelCard& card) {
  if (!card.prompt_outputs) {
    return invalid({},
                   fmt::format("Embeddings are not supported by the {} backend.",
                               card.backend.empty() ? "model's" : card.backend),
                   "unsupported_backend");
  }
  const std::optional<int32_t> dimensions = request.output.dimensions;
  // 0: a card that does not know the length (then the shaping keeps what the engine gives).
  if (dimensions && card.info.embedding_length > 0 &&
      static_cast<uint64_t>(*dimensions) > card.info.embedding_length) {
    return invalid("dimensions",
                   fmt::format("Invalid value for 'dimensions': {} is greater than the model's "
                               "embedding length ({}).",
                               *dimensions, card.info.embedding_length));
  }
  return std::nullopt;
}

void normalize_embedding(std::span<float> vector, int32_t norm) {
  // NOTE: llama.cpp's exact operations: each square (or |x|^p) is computed in float or double as
  // there, summed in double, and the scale is rounded to float once before the multiplies.
  double sum = 0.0;
  switch (norm) {
    case kEmbeddingNormNone: sum = 1.0; break;
    case kEmbeddingNormMaxAbsInt16:
      for (const float x : vector) {
        if (sum < std::abs(x)) sum = std::abs(x);
      }
      sum /= 32760.0;
      break;
    case kEmbeddingNormEuclidean:
      for (const float x : vector) {
        const float square = x * x;
        sum += square;
      }
      sum = std::sqrt(sum);
      break;
    default:  // the p-norm, taxicab (p = 1) included
      for (const float x : vector) sum += std::pow(static_cast<double>(std::abs(x)), norm);
      sum = std::pow(sum, 1.0 / norm);
      break;
  }
  const float scale = sum > 0.0 ? static_cast<float>(1.0 / sum) : 0.0f;
  for (float& x : vector) x *= scale;
}

std::vector<float> shape_embedding(std::span<const float> pooled, const EmbeddingOutput& output) {
  size_t size = pooled.size();
  if (output.dimensions) size = std::min(size, static_cast<size_t>(*output.dimensions));
  std::vector<float> values(pooled.begin(), pooled.begin() + static_cast<std::ptrdiff_t>(size));
  normalize_embedding(values, output.norm);
  return values;
}

std::string encode_embedding_response(std::string_view model_id, const EmbeddingOutput& output,
                                      const engine::Completion& completion) {
  JsonWriter w;
  w.begin_object().field("object", "list").key("data").begin_array();
  std::string numbers;
  for (size_t index = 0; index < completion.embeddings.size(); ++index) {
    const std::vector<float> values = shape_embedding(completion.embeddings[index], output);
    w.begin_object().field("object", "embedding").field("index", static_cast<uint64_t>(index));
    w.key("embedding");
    switch (output.encoding) {
      case EmbeddingEncoding::kFloat:
        numbers.clear();
        append_float_array(values, numbers);
        w.raw(numbers);
        break;
      case EmbeddingEncoding::kBase64: w.value(base64_of_floats(values)); break;
    }
    w.end_object();
  }
  w.end_array().field("model", model_id).key("usage").begin_object();
  w.field("prompt_tokens", completion.usage.prompt_tokens);
  w.field("total_tokens", completion.usage.prompt_tokens);
  w.end_object().end_object();
  return w.take();
}

ApiError api_error_for_embedding(const engine::RequestError& error) {
  return api_error_for(error, "input");
}

EmbeddingSink::EmbeddingSink(std::shared_ptr<OpenAiContext> context,
                             std::shared_ptr<ResponseStream> out, EmbeddingOutput output,
                             size_t num_inputs, std::shared_ptr<RequestRecord> record)
    : context_(std::move(context)),
      out_(std::move(out)),
      output_(output),
      num_inputs_(num_inputs),
      record_(std::move(record)) {}

bool EmbeddingSink::on_delta(engine::RequestId request_id, engine::TokenDelta /*delta*/) {
  record_->note_request_id(request_id);  // nothing to stream: only whether to go on
  return !out_->client_gone();
}

void EmbeddingSink::on_finish(engine::RequestId request_id, engine::Completion completion) {
  record_->note_request_id(request_id);
  const bool client_gone = out_->client_gone();
  if (completion.embeddings.size() != num_inputs_) {
    // A cancel (the client left, an admin, shutdown) ends the request without its vectors: it
    // counts as a finish like any cancel; anything else missing is an engine fault.
    const bool cancelled = completion.finish_reason == "cancelled";
    ApiError error;
    error.status = 500;
    error.type = "server_error";
    error.code = cancelled ? "cancelled" : "internal_error";
    error.message = cancelled ? "The request was cancelled before its embeddings were computed."
                              : fmt::format("The engine returned {} embeddings for {} inputs.",
                                            completion.embeddings.size(), num_inputs_);
    if (cancelled) {
      record_->finish(completion, client_gone);
    } else {
      record_->fail(error, client_gone);
    }
    out_->respond(error_response(error));
    return;
  }
  record_->finish(completion, client_gone);
  if (client_gone) return;  // nobody to encode for
  size_t num_floats = 0;
  for (const std::vector<float>& vector : completion.embeddings) num_floats += vector.size();
  const std::string& model_id = context_->state.model.id;
  if (num_floats <= kInlineEncodeFloats) {
    out_->respond(json_response(200, encode_embedding_response(model_id, output_, completion)));
    return;
  }
  context_->engine.post_tokenizer_work(
      [out = out_, output = output_, model_id, completion = std::move(completion)] {
        if (out->client_gone()) return;
        out->respond(json_response(200, encode_embedding_response(model_id, output, completion)));
      });
}

void EmbeddingSink::on_error(engine::RequestId request_id, engine::RequestError error) {
  const ApiError api = api_error_for_embedding(error);
  record_->note_request_id(request_id);
  record_->fail(api, out_->client_gone());
  out_->respond(engine_error_response(api));
}

void handle_embeddings(const std::shared_ptr<OpenAiContext>& context, const HttpRequest& request,
                       const std::shared_ptr<ResponseStream>& out) {
  const std::string route(request.path());
  ParsedEmbedding parsed =
      parse_embedding_request(request.body, context->state.model.id, context->config);
  std::optional<ApiError> refusal;
  if (auto* error = std::get_if<ApiError>(&parsed)) {
    refusal = *error;
  } else {
    refusal =
        check_embedding_support(std::get<EmbeddingRequest>(parsed), context->engine.model_card());
  }
  if (!refusal) refusal = context->admit(request.api_key_name, out.get());
  if (refusal) {
    context->record(route, "-", {}, request.api_key_name, engine::RequestKind::kEmbedding)->fail(*refusal);
    out->respond(error_response(*refusal));
    return;
  }
  EmbeddingRequest& embedding = std::get<EmbeddingRequest>(parsed);
  embedding.generate.client =
      client_key(request.api_key_name, request.header("Authorization"), embedding.user,
                 http_connection_label(request.connection_id));
  const auto num_inputs = static_cast<size_t>(embedding.generate.n);
  // The body has no id (OpenAI's shape), so the access line goes by the engine's request id.
  auto record =
      context->record(route, "-", fmt::format("inputs={}", num_inputs), request.api_key_name,
                      engine::RequestKind::kEmbedding);
  auto sink = std::make_shared<EmbeddingSink>(context, out, embedding.output, num_inputs,
                                              std::move(record));
  const engine::RequestId id = context->engine.submit(std::move(embedding.generate), sink);
  out->on_client_gone([context, id] { context->engine.cancel(id); });
}

}  // namespace troupe::net
