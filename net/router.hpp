// Maps (method, path) to a handler. A plain handler is a pure function from request to response,
// so routes are tested without sockets; an async handler gets a ResponseStream and completes it
// later, from any thread (generation, SSE, batch). A path that exists under another method
// answers 405.
//
// Thread-safety: build on one thread before serving; afterwards `dispatch`/`handle` are const
// and may run on every io thread at once (handlers must be thread-safe themselves).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "net/http_types.hpp"
#include "net/response_stream.hpp"

namespace troupe::net {

class Router {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  // Must not block: it starts the work and returns; the work completes `out` (exactly once:
  // respond(), or begin_stream() ... end()).
  using AsyncHandler = std::function<void(HttpRequest request, std::shared_ptr<ResponseStream> out)>;

  // `path` matches exactly, or, ending in "/*", any path with that prefix.
  void add(std::string method, std::string path, Handler handler);
  void add_async(std::string method, std::string path, AsyncHandler handler);

  // What the server calls for every request.
  void dispatch(HttpRequest request, std::shared_ptr<ResponseStream> out) const;

  // Dispatches and waits for the complete response (a streamed body is concatenated). Blocks
  // the calling thread: for tests and tools, never on an io thread.
  HttpResponse handle(const HttpRequest& request) const;

 private:
  struct Route {
    std::string method;
    std::string path;
    bool prefix = false;
    Handler handler;
    AsyncHandler async_handler;
  };
  void add_route(Route route);
  bool matches(const Route& route, std::string_view path) const;

  std::vector<Route> routes_;
};

}  // namespace troupe::net
