// The dashboard's page and JSON (see dashboard_routes.hpp).
#include "net/dashboard_routes.hpp"

#include <charconv>
#include <string>

#include "net/admin_protocol.hpp"
#include "net/json_writer.hpp"

namespace troupe::net {
namespace {

constexpr std::string_view kRequestsPath = "/v1/dashboard/requests";

// Who may cancel other users' requests from the dashboard.
bool may_cancel(const HttpRequest& request) {
  return request.api_key_name.empty() || request.api_key_is_admin;
}

HttpResponse stats(engine::Engine& engine, const ServingMetrics& metrics, const HttpRequest& request) {
  int64_t rate_limited = 0;
  for (const KeyUsage& key : metrics.rate_limits.usage(steady_now_s())) rate_limited += key.refused;
  // The admin reply is a complete JSON object: it goes in whole, beside what only HTTP knows.
  std::string body = "{\"stats\":" + admin_stats_reply(engine.stats(), engine.model_card());
  body += ",\"rate_limited\":" + std::to_string(rate_limited);
  body += std::string(",\"can_cancel\":") + (may_cancel(request) ? "true" : "false") + "}";
  return json_response(200, std::move(body));
}

// POST /v1/dashboard/requests/{id}/cancel.
HttpResponse cancel(engine::Engine& engine, const HttpRequest& request) {
  std::string_view rest = request.path().substr(kRequestsPath.size());
  constexpr std::string_view kCancel = "/cancel";
  if (rest.size() <= kCancel.size() + 1 || rest.front() != '/' || !rest.ends_with(kCancel)) {
    return error_response(404, "Not found.", "invalid_request_error", "", "not_found");
  }
  const std::string_view digits = rest.substr(1, rest.size() - 1 - kCancel.size());
  engine::RequestId id = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), id);
  if (ec != std::errc{} || end != digits.data() + digits.size()) {
    return error_response(400, "The request id must be a number (from /v1/dashboard/requests).",
                          "invalid_request_error", "id", "invalid_value");
  }
  if (!may_cancel(request)) {
    return error_response(403, "Only an admin key (the keys file's `admin` column) may cancel "
                               "other users' requests.",
                          "permission_error", "", "not_admin");
  }
  return json_response(200, execute_admin_command(AdminCancel{id}, engine).reply);
}

}  // namespace

void add_dashboard_routes(Router& router, engine::Engine& engine,
                          std::shared_ptr<const ServingMetrics> metrics) {
  router.add("GET", "/dashboard", [](const HttpRequest&) {
    HttpResponse response;
    response.content_type = "text/html; charset=utf-8";
    response.body = std::string(dashboard_page_html());
    response.headers.emplace_back("Cache-Control", "no-cache");
    return response;
  });
  router.add("GET", "/v1/dashboard/stats", [&engine, metrics](const HttpRequest& request) {
    return stats(engine, *metrics, request);
  });
  router.add("GET", std::string(kRequestsPath), [&engine](const HttpRequest&) {
    return json_response(200, admin_requests_reply(engine.requests()));
  });
  router.add("POST", std::string(kRequestsPath) + "/*",
             [&engine](const HttpRequest& request) { return cancel(engine, request); });
}

}  // namespace troupe::net
