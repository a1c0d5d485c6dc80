// The engine-backed HTTP API: POST /v1/chat/completions, /v1/completions (SSE when streamed),
// /v1/batch, /tokenize, /detokenize and GET /metrics.
//
// Thread-safety: call once while building the router (before serving). `engine` and `state`
// must outlive the router (the handlers and every live request keep a shared context that
// refers to them).
#pragma once

#include <functional>
#include <memory>

#include "actors/engine/engine.hpp"
#include "net/metrics.hpp"
#include "net/openai_request.hpp"
#include "net/openai_sink.hpp"
#include "net/router.hpp"
#include "net/server_state.hpp"

namespace troupe::net {

// `handler` run on the engine's tokenizer thread, never an io thread (tokenizing megabytes, moving
// whole files, waiting on an actor's answer would stall every connection of that thread); skipped
// when the client has left by then. `engine` must outlive the router.
Router::AsyncHandler on_engine_worker(engine::Engine& engine,
                                      std::function<HttpResponse(const HttpRequest&)> handler);

// `metrics`: the request counters and latency histograms /metrics shows, shared with the other
// surfaces (the WebSocket chat) so that it counts every request; null: the routes' own.
// Returns the routes' context, for the surfaces that submit as they do (the durable batches).
std::shared_ptr<OpenAiContext> add_openai_routes(Router& router, engine::Engine& engine,
                                                 const ServerState& state,
                                                 const OpenAiApiConfig& config,
                                                 std::shared_ptr<ServingMetrics> metrics = nullptr);

}  // namespace troupe::net
