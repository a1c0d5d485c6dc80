#include "net/batch_codec.hpp"

#include <random>

#include <fmt/format.h>
#include <simdjson.h>

#include "net/json_input.hpp"
#include "net/json_writer.hpp"

namespace troupe::net {
namespace {

namespace dom = simdjson::dom;

ApiError item_error(int status, std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

std::optional<ApiKind> kind_for_url(std::string_view url) {
  if (url == "/v1/chat/completions") return ApiKind::kChat;
  if (url == "/v1/completions") return ApiKind::kCompletion;
  return std::nullopt;
}

// One batch entry, already parsed as JSON.
BatchItem decode_item(dom::element entry, std::string_view served_model_id,
                      const OpenAiApiConfig& config) {
  BatchItem item;
  if (!entry.is_object()) {
    item.line_error = item_error(400, "A batch item must be a JSON object.", {}, "invalid_json");
    return item;
  }
  const dom::object object(entry);
  std::string_view text;
  if (object["custom_id"].get(text) != simdjson::SUCCESS) {
    item.line_error = item_error(400, "'custom_id' (a string) is required.", "custom_id",
                                 "missing_required_parameter");
    return item;
  }
  item.custom_id = std::string(text);
  if (object["method"].get(text) == simdjson::SUCCESS && text != "POST") {
    item.response_error = item_error(405, fmt::format("method {} is not allowed", text), "method",
                                     "method_not_allowed");
    return item;
  }
  std::string_view url;
  if (object["url"].get(url) != simdjson::SUCCESS) url = {};
  const auto kind = kind_for_url(url);
  const bool embeddings = url == "/v1/embeddings";
  if (!kind && !embeddings) {
    item.response_error = item_error(
        400,
        fmt::format("'url' must be /v1/chat/completions, /v1/completions or /v1/embeddings, not '{}'", url),
        "url", "invalid_value");
    return item;
  }
  dom::element body;
  if (object["body"].get(body) != simdjson::SUCCESS || !body.is_object()) {
    item.response_error = item_error(400, "'body' (an object) is required.", "body",
                                     "missing_required_parameter");
    return item;
  }
  if (embeddings) {
    ParsedEmbedding parsed = parse_embedding_request(simdjson::minify(body), served_model_id, config);
    if (auto* error = std::get_if<ApiError>(&parsed)) {
      item.response_error = std::move(*error);
      return item;
    }
    item.embedding = std::move(std::get<EmbeddingRequest>(parsed));
    item.embedding->generate.origin = engine::RequestOrigin::kBatch;
    item.embedding->generate.client_label = item.custom_id;
    return item;
  }
  ParsedCompletion parsed =
      parse_completion_request(*kind, simdjson::minify(body), served_model_id, config);
  if (auto* error = std::get_if<ApiError>(&parsed)) {
    item.response_error = std::move(*error);
    return item;
  }
  item.request = std::move(std::get<CompletionRequest>(parsed));
  item.request->stream = false;  // batch results are whole responses
  item.request->include_usage = false;
  item.request->generate.origin = engine::RequestOrigin::kBatch;
  item.request->generate.client_label = item.custom_id;
  return item;
}

std::optional<ApiError> check_count(size_t count, const OpenAiApiConfig& config) {
  if (count == 0) return item_error(400, "The batch holds no requests.", {}, "empty_batch");
  if (count > static_cast<size_t>(config.max_batch_items)) {
    return item_error(413, fmt::format("The batch holds {} requests; the limit is {}.", count,
                                       config.max_batch_items),
                      {}, "batch_too_large");
  }
  return std::nullopt;
}

std::vector<std::string_view> split_lines(std::string_view body) {
  std::vector<std::string_view> lines;
  while (!body.empty()) {
    const size_t end = body.find('\n');
    std::string_view line = body.substr(0, end);
    body = end == std::string_view::npos ? std::string_view{} : body.substr(end + 1);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
      line.remove_suffix(1);
    }
    if (line.find_first_not_of(" \t") != std::string_view::npos) lines.push_back(line);
  }
  return lines;
}

std::variant<ParsedBatch, ApiError> parse_jsonl(std::string_view body, std::string_view model_id,
                                                const OpenAiApiConfig& config) {
  const std::vector<std::string_view> lines = split_lines(body);
  if (auto error = check_count(lines.size(), config)) return *error;
  ParsedBatch batch;
  dom::parser parser;  // NOTE: not parse_completion_request's thread_local parser
  for (size_t i = 0; i < lines.size(); ++i) {
    dom::element entry;
    if (const auto error = parser.parse(simdjson::padded_string(lines[i])).get(entry)) {
      BatchItem item;
      item.line_error = item_error(
          400, fmt::format("line {}: {}", i + 1,
                           describe_bad_json(lines[i], simdjson::error_message(error))),
          {}, "invalid_json");
      batch.items.push_back(std::move(item));
      continue;
    }
    batch.items.push_back(decode_item(entry, model_id, config));
  }
  return batch;
}

}  // namespace

std::variant<ParsedBatch, ApiError> parse_batch(std::string_view body,
                                                std::string_view content_type,
                                                std::string_view served_model_id,
                                                const OpenAiApiConfig& config) {
  const bool says_jsonl = content_type.find("jsonl") != std::string_view::npos ||
                          content_type.find("ndjson") != std::string_view::npos;
  if (!says_jsonl) {
    dom::parser parser;
    dom::element root;
    const auto error = parser.parse(simdjson::padded_string(body)).get(root);
    dom::array requests;
    if (!error && root.is_object() && root["requests"].get(requests) == simdjson::SUCCESS) {
      if (auto count_error = check_count(requests.size(), config)) return *count_error;
      ParsedBatch batch;
      batch.jsonl = false;
      for (dom::element entry : requests) {
        batch.items.push_back(decode_item(entry, served_model_id, config));
      }
      return batch;
    }
    if (content_type.find("application/json") != std::string_view::npos &&
        split_lines(body).size() <= 1) {
      return item_error(400, error ? describe_bad_json(body, simdjson::error_message(error))
                                   : "The body must be {\"requests\": [...]} or JSONL.",
                        "requests", "invalid_json");
    }
  }
  return parse_jsonl(body, served_model_id, config);
}

BatchItem decode_batch_line(std::string_view line, std::string_view served_model_id,
                            const OpenAiApiConfig& config) {
  dom::parser parser;
  dom::element entry;
  if (const auto error = parser.parse(simdjson::padded_string(line)).get(entry)) {
    BatchItem item;
    item.line_error = item_error(400, describe_bad_json(line, simdjson::error_message(error)), {},
                                 "invalid_json");
    return item;
  }
  return decode_item(entry, served_model_id, config);
}

std::string batch_result_json(const BatchItem& item, int status_code, std::string_view request_id,
                              std::string_view body_json) {
  thread_local std::mt19937_64 random{std::random_device{}()};
  JsonWriter w;
  w.begin_object().field("id", fmt::format("batch_req_{:016x}", random()));
  w.field("custom_id", item.custom_id);
  w.key("response").begin_object().field("status_code", status_code);
  w.field("request_id", request_id).key("body").raw(body_json).end_object();
  w.key("error").null().end_object();
  return w.take();
}

std::string batch_failed_item_json(const BatchItem& item) {
  if (item.response_error) {
    return batch_result_json(item, item.response_error->status, "",
                             error_response(*item.response_error).body);
  }
  JsonWriter w;
  w.begin_object().field("id", "batch_req_invalid").field("custom_id", item.custom_id);
  w.key("response").null().key("error").begin_object();
  const ApiError fallback{400, "invalid batch item"};
  const ApiError& error = item.line_error ? *item.line_error : fallback;
  w.field("code", error.code).field("message", error.message).end_object();
  w.end_object();
  return w.take();
}

}  // namespace troupe::net
