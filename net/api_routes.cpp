#include "net/api_routes.hpp"

#include <fmt/format.h>

#include "net/json_writer.hpp"
#include "model/enum_names.hpp"

namespace troupe::net {

constexpr EnumNames<ServerPhase, 3> kServerPhaseNames{{{
    {ServerPhase::kLoading, "loading"}, {ServerPhase::kReady, "ok"},
    {ServerPhase::kDraining, "draining"}}}};
static_assert(kServerPhaseNames.dense());

std::string_view to_string(ServerPhase phase) { return kServerPhaseNames.name(phase); }

void write_kv_capacity(JsonWriter& w, const engine::KvCapacity& kv) {
  w.key("kv_cache").begin_object();
  w.field("dtype", kv.dtype).field("blocks", kv.blocks).field("block_size", kv.block_size);
  w.field("tokens", kv.tokens).field("bytes", kv.bytes);
  w.field("conversations", kv.conversations).field("conversation_tokens", kv.conversation_tokens);
  w.end_object();
}

std::string model_object_json(const ServerState& state) {
  const model::ModelInfo& m = state.model;
  JsonWriter w;
  w.begin_object();
  w.field("id", m.id).field("object", "model").field("created", state.created_unix_seconds);
  w.field("owned_by", "troupe").field("root", m.id);
  w.field("max_model_len", m.context_length);
  // llama.cpp's server puts the model's facts under "meta"; same idea, self-explaining names.
  w.key("meta").begin_object();
  w.field("name", m.name).field("architecture", m.architecture);
  w.field("context_length", m.context_length).field("num_layers", m.num_layers);
  w.field("embedding_length", m.embedding_length).field("num_heads", m.num_heads);
  w.field("num_kv_heads", m.num_kv_heads).field("vocab_size", m.vocab_size);
  w.field("num_parameters", m.num_parameters).field("quantization", m.quantization);
  w.field("file_bytes", m.file_bytes).field("backend", state.backend);
  write_kv_capacity(w, state.kv);
  w.end_object();
  w.end_object();
  return w.take();
}

void add_info_routes(Router& router, const ServerState& state) {
  router.add("GET", "/health", [&state](const HttpRequest&) {
    const ServerPhase phase = state.phase.load(std::memory_order_acquire);
    JsonWriter w;
    w.begin_object().field("status", to_string(phase)).end_object();
    return json_response(phase == ServerPhase::kReady ? 200 : 503, w.take());
  });

  router.add("GET", "/v1/models", [&state](const HttpRequest&) {
    JsonWriter w;
    w.begin_object().field("object", "list").key("data").begin_array();
    w.raw(model_object_json(state));
    w.end_array();
    // Not OpenAI's: tells a client (the web page) whether the server wants a key.
    w.field("auth", state.api_key_required.load(std::memory_order_acquire) ? "api_key" : "none");
    w.end_object();
    return json_response(200, w.take());
  });

  router.add("GET", "/v1/models/*", [&state](const HttpRequest& request) {
    const std::string_view id = request.path().substr(std::string_view("/v1/models/").size());
    if (id != state.model.id) {
      return error_response(404, fmt::format("The model '{}' does not exist", id),
                            "not_found_error", "model", "model_not_found");
    }
    return json_response(200, model_object_json(state));
  });
}

}  // namespace troupe::net
