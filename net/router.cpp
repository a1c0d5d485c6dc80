#include "net/router.hpp"

#include <fmt/format.h>

namespace troupe::net {

void Router::add(std::string method, std::string path, Handler handler) {
  Route route{std::move(method), std::move(path), false, std::move(handler)};
  if (route.path.ends_with("/*")) {
    route.path.resize(route.path.size() - 1);  // keep the trailing '/'
    route.prefix = true;
  }
  routes_.push_back(std::move(route));
}

bool Router::matches(const Route& route, std::string_view path) const {
  return route.prefix ? path.starts_with(route.path) && path.size() > route.path.size()
                      : path == route.path;
}

HttpResponse Router::handle(const HttpRequest& request) const {
  const std::string_view path = request.path();
  bool path_known = false;
  for (const Route& route : routes_) {
    if (!matches(route, path)) continue;
    if (route.method == request.method) return route.handler(request);
    path_known = true;
  }
  if (path_known) {
    return error_response(405, fmt::format("method {} is not allowed on {}", request.method, path),
                          "invalid_request_error", {}, "method_not_allowed");
  }
  return error_response(404, fmt::format("no route for {} {}", request.method, path),
                        "not_found_error", {}, "not_found");
}

}  // namespace troupe::net
