#include "net/batches_routes.hpp"

#include <charconv>
#include <chrono>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <simdjson.h>

#include "net/json_input.hpp"
#include "net/json_writer.hpp"
#include "net/openai_field_errors.hpp"
#include "net/openai_routes.hpp"

namespace troupe::net {
namespace {

namespace dom = simdjson::dom;
using openai_fields::invalid;

constexpr std::string_view kBatchesPath = "/v1/batches";
constexpr int32_t kMaxListLimit = 100;
constexpr size_t kMaxMetadataKeys = 16;  // OpenAI's limits on metadata
constexpr size_t kMaxMetadataKeyChars = 64;
constexpr size_t kMaxMetadataValueChars = 512;
constexpr std::string_view kEndpoints[] = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings"};
constexpr std::string_view kCreateFields[] = {"input_file_id", "endpoint", "completion_window", "metadata"};

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void optional_time(JsonWriter& w, std::string_view key, const std::optional<int64_t>& at) {
  w.key(key);
  at ? w.value(*at) : w.null();
}

void optional_text(JsonWriter& w, std::string_view key, const std::optional<std::string>& text) {
  w.key(key);
  text ? w.value(*text) : w.null();
}

void write_batch(JsonWriter& w, const batch::BatchRecord& b) {
  w.begin_object().field("id", b.id).field("object", "batch").field("endpoint", b.endpoint);
  w.key("errors");
  if (b.errors_json) {
    w.begin_object().field("object", "list").key("data").raw(*b.errors_json).end_object();
  } else {
    w.null();
  }
  w.field("input_file_id", b.input_file_id).field("completion_window", b.completion_window);
  w.field("status", batch::to_string(b.status));
  optional_text(w, "output_file_id", b.output_file_id);
  optional_text(w, "error_file_id", b.error_file_id);
  w.field("created_at", b.created_at);
  optional_time(w, "in_progress_at", b.in_progress_at);
  w.field("expires_at", b.expires_at);
  optional_time(w, "finalizing_at", b.finalizing_at);
  optional_time(w, "completed_at", b.completed_at);
  optional_time(w, "failed_at", b.failed_at);
  optional_time(w, "expired_at", b.expired_at);
  optional_time(w, "cancelling_at", b.cancelling_at);
  optional_time(w, "cancelled_at", b.cancelled_at);
  w.key("request_counts").begin_object();
  w.field("total", b.total).field("completed", b.completed).field("failed", b.failed).end_object();
  w.key("metadata");
  b.metadata_json ? w.raw(*b.metadata_json) : w.null();
  w.end_object();
}

HttpResponse batch_json(const batch::BatchRecord& b) {
  JsonWriter w;
  write_batch(w, b);
  return json_response(200, w.take());
}

HttpResponse not_found(std::string_view id) {
  return error_response(404, fmt::format("No such Batch object: {}", id), "invalid_request_error", "id",
                        "not_found");
}

HttpResponse storage_failed(const batch::StorageError& error) {
  return error_response(500, fmt::format("storage failed: {}", error.message), "server_error", "",
                        "storage_error");
}

// metadata: an object of at most 16 string values (keys up to 64 characters, values up to 512),
// re-written as canonical JSON.
std::variant<std::string, ApiError> read_metadata(dom::element e) {
  dom::object object;
  if (e.get(object) != simdjson::SUCCESS) return openai_fields::bad_type("metadata", "an object of strings");
  JsonWriter w;
  w.begin_object();
  size_t count = 0;
  for (const auto entry : object) {
    std::string_view value;
    if (entry.value.get(value) != simdjson::SUCCESS) {
      return openai_fields::bad_type(fmt::format("metadata.{}", entry.key), "a string");
    }
    if (++count > kMaxMetadataKeys || entry.key.size() > kMaxMetadataKeyChars ||
        value.size() > kMaxMetadataValueChars) {
      return invalid("metadata", fmt::format("'metadata' holds at most {} pairs, keys of at most {} characters "
                                             "and values of at most {}.",
                                             kMaxMetadataKeys, kMaxMetadataKeyChars, kMaxMetadataValueChars));
    }
    if (auto error = openai_fields::check_text("metadata", entry.key)) return *error;
    if (auto error = openai_fields::check_text("metadata", value)) return *error;
    w.field(entry.key, value);
  }
  w.end_object();
  return w.take();
}

std::variant<batch::BatchRecord, ApiError> parse_create(std::string_view body, const engine::Engine& engine,
                                                         const batch::FileStore& files, std::string_view owner) {
  dom::parser parser;
  dom::element root;
  if (const auto error = parser.parse(simdjson::padded_string(body)).get(root)) {
    return invalid("", describe_bad_json(body, simdjson::error_message(error)), "invalid_json");
  }
  dom::object o;
  if (root.get(o) != simdjson::SUCCESS) return invalid("", "The body must be a JSON object.", "invalid_json");
  for (const auto entry : o) {
    if (std::find(std::begin(kCreateFields), std::end(kCreateFields), entry.key) == std::end(kCreateFields) &&
        !entry.value.is_null()) {
      return invalid(std::string(entry.key), fmt::format("'{}' is not supported by /v1/batches.", entry.key),
                     "unknown_parameter");
    }
  }
  batch::BatchRecord record;
  record.owner = std::string(owner);
  for (auto [key, out] : {std::pair{"input_file_id", &record.input_file_id}, std::pair{"endpoint", &record.endpoint},
                          std::pair{"completion_window", &record.completion_window}}) {
    if (auto error = openai_fields::read_string(o, key, *out)) return *error;
    if (out->empty()) {
      return invalid(key, fmt::format("'{}' is required.", key), "missing_required_parameter");
    }
  }
  if (std::find(std::begin(kEndpoints), std::end(kEndpoints), record.endpoint) == std::end(kEndpoints)) {
    return invalid("endpoint", fmt::format("'endpoint' must be /v1/chat/completions, /v1/completions or "
                                           "/v1/embeddings, not '{}'.",
                                           record.endpoint));
  }
  if (record.endpoint == "/v1/embeddings" && !engine.model_card().prompt_outputs) {
    return invalid("endpoint", fmt::format("The {} backend does not compute embeddings.",
                                           engine.model_card().backend));
  }
  const std::optional<int64_t> window = completion_window_seconds(record.completion_window);
  if (!window) {
    return invalid("completion_window", fmt::format("'completion_window' must be \"24h\" (or \"<N>h\", \"<N>m\", "
                                                    "\"<N>s\" up to 7 days), not '{}'.",
                                                    record.completion_window));
  }
  if (const auto metadata = openai_fields::field(o, "metadata")) {
    auto read = read_metadata(*metadata);
    if (auto* error = std::get_if<ApiError>(&read)) return *error;
    record.metadata_json = std::move(std::get<std::string>(read));
  }
  const std::optional<batch::StoredFile> input = files.get(owner, record.input_file_id);
  if (!input) {
    ApiError error = invalid("input_file_id", fmt::format("No such File object: {}", record.input_file_id),
                             "not_found");
    error.status = 404;
    return error;
  }
  if (input->purpose != "batch") {
    return invalid("input_file_id", fmt::format("The file {} has purpose '{}'; a batch reads 'batch' files.",
                                                input->id, input->purpose));
  }
  record.created_at = unix_now();
  record.expires_at = record.created_at + *window;
  return record;
}

HttpResponse create(const engine::Engine& engine, const batch::FileStore& files, batch::BatchStore& store,
                    batch::BatchActor& actor, const HttpRequest& request) {
  auto parsed = parse_create(request.body, engine, files, request.api_key_name);
  if (auto* error = std::get_if<ApiError>(&parsed)) return error_response(*error);
  auto created = store.create(std::move(std::get<batch::BatchRecord>(parsed)));
  if (auto* error = std::get_if<batch::StorageError>(&created)) return storage_failed(*error);
  actor.wake();
  return batch_json(std::get<batch::BatchRecord>(created));
}

HttpResponse list(const batch::BatchStore& store, const HttpRequest& request) {
  batch::BatchListQuery query;
  auto page = read_list_page(request, kMaxListLimit);
  if (auto* refused = std::get_if<HttpResponse>(&page)) return std::move(*refused);
  query.limit = std::get<ListPage>(page).limit.value_or(query.limit);
  query.after = std::move(std::get<ListPage>(page).after);
  const batch::BatchList batches = store.list(request.api_key_name, query);
  JsonWriter w;
  w.begin_object().field("object", "list").key("data").begin_array();
  for (const batch::BatchRecord& b : batches.batches) write_batch(w, b);
  w.end_array();
  w.key("first_id");
  batches.batches.empty() ? w.null() : w.value(batches.batches.front().id);
  w.key("last_id");
  batches.batches.empty() ? w.null() : w.value(batches.batches.back().id);
  w.field("has_more", batches.has_more).end_object();
  return json_response(200, w.take());
}

// GET /v1/batches/{id} and POST /v1/batches/{id}/cancel.
HttpResponse one_batch(batch::BatchStore& store, batch::BatchActor& actor, const HttpRequest& request) {
  std::string_view rest = request.path().substr(kBatchesPath.size());
  if (rest.size() < 2 || rest.front() != '/') return error_response(404, "Not found.", "invalid_request_error", "", "not_found");
  rest.remove_prefix(1);
  const size_t slash = rest.find('/');
  const std::string_view id = rest.substr(0, slash);
  const std::string_view action = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash);
  if (request.method == "GET" && action.empty()) {
    const auto found = store.get(request.api_key_name, id);
    return found ? batch_json(*found) : not_found(id);
  }
  if (request.method == "POST" && action == "/cancel") {
    auto cancelled = store.request_cancel(request.api_key_name, id, unix_now());
    if (!cancelled) return not_found(id);
    if (auto* error = std::get_if<batch::StorageError>(&*cancelled)) return storage_failed(*error);
    actor.wake();
    return batch_json(std::get<batch::BatchRecord>(*cancelled));
  }
  return error_response(404, "Not found.", "invalid_request_error", "", "not_found");
}

}  // namespace

std::optional<int64_t> completion_window_seconds(std::string_view window) {
  if (window.size() < 2) return std::nullopt;
  int64_t count = 0;
  const auto [end, ec] = std::from_chars(window.data(), window.data() + window.size() - 1, count);
  if (ec != std::errc{} || end != window.data() + window.size() - 1 || count < 1) return std::nullopt;
  int64_t unit = 0;
  switch (window.back()) {
    case 's': unit = 1; break;
    case 'm': unit = 60; break;
    case 'h': unit = 3600; break;
    default: return std::nullopt;
  }
  constexpr int64_t kMaxSeconds = 7 * 24 * 3600;
  if (count > kMaxSeconds / unit) return std::nullopt;
  return count * unit;
}

void add_batches_routes(Router& router, engine::Engine& engine, std::shared_ptr<batch::FileStore> files,
                        std::shared_ptr<batch::BatchStore> batches, std::shared_ptr<batch::BatchActor> actor) {
  router.add_async("POST", std::string(kBatchesPath),
                   on_engine_worker(engine, [&engine, files, batches, actor](const HttpRequest& r) {
                     return create(engine, *files, *batches, *actor, r);
                   }));
  router.add_async("GET", std::string(kBatchesPath), on_engine_worker(engine, [batches](const HttpRequest& r) {
                     return list(*batches, r);
                   }));
  for (const char* method : {"GET", "POST"}) {
    router.add_async(method, std::string(kBatchesPath) + "/*",
                     on_engine_worker(engine, [batches, actor](const HttpRequest& r) {
                       return one_batch(*batches, *actor, r);
                     }));
  }
}

}  // namespace troupe::net
