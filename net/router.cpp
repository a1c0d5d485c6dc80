#include "net/router.hpp"

#include <condition_variable>

#include <fmt/format.h>

namespace troupe::net {

void Router::add_route(Route route) {
  if (route.path.ends_with("/*")) {
    route.path.resize(route.path.size() - 1);  // keep the trailing '/'
    route.prefix = true;
  }
  routes_.push_back(std::move(route));
}

void Router::add(std::string method, std::string path, Handler handler) {
  add_route(Route{std::move(method), std::move(path), false, std::move(handler), nullptr});
}

void Router::add_async(std::string method, std::string path, AsyncHandler handler) {
  add_route(Route{std::move(method), std::move(path), false, nullptr, std::move(handler)});
}

bool Router::matches(const Route& route, std::string_view path) const {
  return route.prefix ? path.starts_with(route.path) && path.size() > route.path.size()
                      : path == route.path;
}

void Router::dispatch(HttpRequest request, std::shared_ptr<ResponseStream> out) const {
  const std::string path(request.path());
  bool path_known = false;
  for (const Route& route : routes_) {
    if (!matches(route, path)) continue;
    if (route.method != request.method) {
      path_known = true;
      continue;
    }
    if (route.async_handler) {
      route.async_handler(std::move(request), std::move(out));
    } else {
      out->respond(route.handler(request));
    }
    return;
  }
  if (path_known) {
    out->respond(error_response(405,
                                fmt::format("method {} is not allowed on {}", request.method, path),
                                "invalid_request_error", {}, "method_not_allowed"));
    return;
  }
  out->respond(error_response(404, fmt::format("no route for {} {}", request.method, path),
                              "not_found_error", {}, "not_found"));
}

HttpResponse Router::handle(const HttpRequest& request) const {
  struct Waiter {
    std::mutex mutex;
    std::condition_variable cv;
    bool rung = false;
  };
  auto waiter = std::make_shared<Waiter>();
  auto out = std::make_shared<ResponseStream>(size_t{1} << 30);
  out->attach([waiter] {
    std::lock_guard lock(waiter->mutex);
    waiter->rung = true;
    waiter->cv.notify_all();
  });
  dispatch(request, out);
  HttpResponse response;
  while (true) {
    ResponseStream::Pending pending = out->take();
    if (pending.head) {
      response = std::move(*pending.head);
    }
    response.body += pending.data;
    if (pending.finished) break;
    std::unique_lock lock(waiter->mutex);
    waiter->cv.wait(lock, [&] { return waiter->rung; });
    waiter->rung = false;
  }
  out->detach();
  return response;
}

}  // namespace troupe::net
