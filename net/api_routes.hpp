// The HTTP API's routes that need no engine: /health and /v1/models.
//
// Thread-safety: call once while building the router; the handlers read `state` from any io
// thread (see ServerState).
#pragma once

#include "net/json_writer.hpp"
#include "net/router.hpp"
#include "net/server_state.hpp"

namespace troupe::net {

void add_info_routes(Router& router, const ServerState& state);

// The OpenAI model object for the served model (shared by /v1/models and /v1/models/{id}).
std::string model_object_json(const ServerState& state);

// "kv_cache": {dtype, blocks, block_size, tokens, bytes, conversations, conversation_tokens}, the
// object /v1/models meta and `troupe admin stats` share.
void write_kv_capacity(JsonWriter& w, const engine::KvCapacity& kv);

}  // namespace troupe::net
