// Maps (method, path) to a handler. Pure: a handler is a function from request to response, so
// routes are tested without sockets. A path that exists under another method answers 405.
//
// Thread-safety: build on one thread before serving; afterwards `handle` is const and may run
// on every io thread at once (handlers must be thread-safe themselves).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "net/http_types.hpp"

namespace troupe::net {

class Router {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // `path` matches exactly, or, ending in "/*", any path with that prefix.
  void add(std::string method, std::string path, Handler handler);

  HttpResponse handle(const HttpRequest& request) const;

 private:
  struct Route {
    std::string method;
    std::string path;
    bool prefix = false;
    Handler handler;
  };
  bool matches(const Route& route, std::string_view path) const;

  std::vector<Route> routes_;
};

}  // namespace troupe::net
