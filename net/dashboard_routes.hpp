// The server dashboard (issue 43): GET /dashboard, a page that charts the server at work, and the
// JSON it polls — the admin socket's figures over HTTP, under /v1/ so that a keyed server asks
// for a key like the rest of the API:
//   GET  /v1/dashboard/stats                 the admin `stats` reply (one schema for both),
//                                            plus the API keys' 429s and whether this key may cancel
//   GET  /v1/dashboard/requests              the admin `requests` reply (every live request)
//   POST /v1/dashboard/requests/{id}/cancel  cancels a live request: with keys configured only a
//                                            key with the keys file's `admin` column may (403
//                                            otherwise); without keys the server is open to
//                                            its network anyway, and so is this.
// The page itself (net/web/dashboard.html) is served open, like the chat page; its data is not.
//
// Thread-safety: build before serving; the handlers run on any io thread (the Engine facade is
// thread-safe).
#pragma once

#include <memory>
#include <string_view>

#include "actors/engine/engine.hpp"
#include "net/metrics.hpp"
#include "net/router.hpp"

namespace troupe::net {

std::string_view dashboard_page_html();

void add_dashboard_routes(Router& router, engine::Engine& engine,
                          std::shared_ptr<const ServingMetrics> metrics);

}  // namespace troupe::net
