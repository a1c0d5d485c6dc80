// The engine-backed HTTP API: POST /v1/chat/completions, /v1/completions (SSE when streamed),
// /v1/batch, /tokenize, /detokenize and GET /metrics.
//
// Thread-safety: call once while building the router (before serving). `engine` and `state`
// must outlive the router (the handlers and every live request keep a shared context that
// refers to them).
#pragma once

#include "actors/engine/engine.hpp"
#include "net/openai_request.hpp"
#include "net/router.hpp"
#include "net/server_state.hpp"

namespace troupe::net {

void add_openai_routes(Router& router, engine::Engine& engine, const ServerState& state,
                       const OpenAiApiConfig& config);

}  // namespace troupe::net
