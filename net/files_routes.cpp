#include "net/files_routes.hpp"

#include <charconv>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "net/json_writer.hpp"
#include "net/multipart.hpp"
#include "net/openai_routes.hpp"

namespace troupe::net {
namespace {

constexpr std::string_view kFilesPath = "/v1/files";
constexpr int32_t kMaxListLimit = 10'000;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void write_file(JsonWriter& w, const batch::StoredFile& file) {
  w.begin_object().field("id", file.id).field("object", "file");
  w.field("bytes", file.bytes).field("created_at", file.created_at);
  w.key("expires_at").null();
  w.field("filename", file.filename).field("purpose", file.purpose);
  // OpenAI's deprecated fields, which its client still reads.
  w.field("status", "processed").key("status_details").null();
  w.end_object();
}

HttpResponse file_json(const batch::StoredFile& file) {
  JsonWriter w;
  write_file(w, file);
  return json_response(200, w.take());
}

HttpResponse not_found(std::string_view id) {
  return error_response(404, fmt::format("No such File object: {}", id), "invalid_request_error",
                        "id", "not_found");
}

HttpResponse storage_failed(const batch::StorageError& error) {
  return error_response(500, fmt::format("storage failed: {}", error.message), "server_error", "",
                        "storage_error");
}

// The file id of /v1/files/{id}[/content]; `content` says which.
std::optional<std::string_view> file_id_of(std::string_view path, bool& content) {
  std::string_view rest = path.substr(kFilesPath.size());
  if (rest.size() < 2 || rest.front() != '/') return std::nullopt;
  rest.remove_prefix(1);
  content = false;
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    if (rest.substr(slash) != "/content") return std::nullopt;
    content = true;
    rest = rest.substr(0, slash);
  }
  if (rest.empty()) return std::nullopt;
  return rest;
}

HttpResponse upload(batch::FileStore& store, const FilesConfig& config, const HttpRequest& request) {
  const auto parsed = parse_multipart_form(request.body, request.header("Content-Type"));
  if (const auto* error = std::get_if<MultipartError>(&parsed)) {
    return error_response(400, fmt::format("The body must be multipart/form-data with 'purpose' and 'file': {}",
                                           error->message),
                          "invalid_request_error", "file", "invalid_multipart");
  }
  const auto& parts = std::get<std::vector<MultipartPart>>(parsed);
  const MultipartPart* purpose = nullptr;
  const MultipartPart* file = nullptr;
  for (const MultipartPart& part : parts) {
    if (part.name == "purpose") purpose = &part;
    if (part.name == "file") file = &part;
    if (part.name != "purpose" && part.name != "file") {
      return error_response(400, fmt::format("'{}' is not supported by /v1/files", part.name),
                            "invalid_request_error", part.name, "unknown_parameter");
    }
  }
  if (purpose == nullptr) {
    return error_response(400, "'purpose' is required.", "invalid_request_error", "purpose",
                          "missing_required_parameter");
  }
  // Batches are what these files are for; the other purposes (fine-tune, assistants, vision,
  // user_data, evals) have nothing here to use them.
  if (purpose->body != "batch") {
    return error_response(400, fmt::format("purpose '{}' is not supported: this server takes 'batch' files",
                                           purpose->body),
                          "invalid_request_error", "purpose", "invalid_value");
  }
  if (file == nullptr || !file->filename) {
    return error_response(400, "'file' (a file part with a filename) is required.",
                          "invalid_request_error", "file", "missing_required_parameter");
  }
  if (file->body.size() > config.max_file_bytes) {
    return error_response(413, fmt::format("The file has {} bytes; the limit is {} (storage.max_file_bytes).",
                                           file->body.size(), config.max_file_bytes),
                          "invalid_request_error", "file", "file_too_large");
  }
  auto created = store.create(request.api_key_name, "batch", *file->filename, file->body, unix_now());
  if (const auto* error = std::get_if<batch::StorageError>(&created)) return storage_failed(*error);
  return file_json(std::get<batch::StoredFile>(created));
}

HttpResponse list(const batch::FileStore& store, const HttpRequest& request) {
  batch::FileListQuery query;
  query.purpose = request.query("purpose");
  if (query.purpose && query.purpose->empty()) query.purpose.reset();
  auto page = read_list_page(request, kMaxListLimit);
  if (auto* refused = std::get_if<HttpResponse>(&page)) return std::move(*refused);
  query.limit = std::get<ListPage>(page).limit.value_or(query.limit);
  query.after = std::move(std::get<ListPage>(page).after);
  if (const auto order = request.query("order")) {
    if (*order != "asc" && *order != "desc") {
      return error_response(400, "'order' must be 'asc' or 'desc'.", "invalid_request_error", "order",
                            "invalid_value");
    }
    query.ascending = *order == "asc";
  }
  const batch::FileList files = store.list(request.api_key_name, query);
  JsonWriter w;
  w.begin_object().field("object", "list").key("data").begin_array();
  for (const batch::StoredFile& file : files.files) write_file(w, file);
  w.end_array();
  w.key("first_id");
  files.files.empty() ? w.null() : w.value(files.files.front().id);
  w.key("last_id");
  files.files.empty() ? w.null() : w.value(files.files.back().id);
  w.field("has_more", files.has_more).end_object();
  return json_response(200, w.take());
}

HttpResponse one_file(batch::FileStore& store, const HttpRequest& request) {
  bool content = false;
  const std::optional<std::string_view> id = file_id_of(request.path(), content);
  if (!id) return error_response(404, "Not found.", "invalid_request_error", "", "not_found");
  if (request.method == "DELETE") {
    if (content || !store.remove(request.api_key_name, *id)) return not_found(*id);
    JsonWriter w;
    w.begin_object().field("id", *id).field("object", "file").field("deleted", true).end_object();
    return json_response(200, w.take());
  }
  if (!content) {
    const std::optional<batch::StoredFile> file = store.get(request.api_key_name, *id);
    return file ? file_json(*file) : not_found(*id);
  }
  auto bytes = store.read(request.api_key_name, *id);
  if (!bytes) return not_found(*id);
  if (const auto* error = std::get_if<batch::StorageError>(&*bytes)) return storage_failed(*error);
  HttpResponse response;
  response.content_type = "application/octet-stream";
  response.body = std::move(std::get<std::string>(*bytes));
  return response;
}

}  // namespace

void add_files_routes(Router& router, engine::Engine& engine,
                      std::shared_ptr<batch::FileStore> store, FilesConfig config) {
  // Off the io threads: uploads and downloads move whole files.
  router.add_async("POST", std::string(kFilesPath), on_engine_worker(engine, [store, config](const HttpRequest& r) {
                     return upload(*store, config, r);
                   }));
  router.add_async("GET", std::string(kFilesPath), on_engine_worker(engine, [store](const HttpRequest& r) {
                     return list(*store, r);
                   }));
  for (const char* method : {"GET", "DELETE"}) {
    router.add_async(method, std::string(kFilesPath) + "/*", on_engine_worker(engine, [store](const HttpRequest& r) {
                       return one_file(*store, r);
                     }));
  }
}

}  // namespace troupe::net
