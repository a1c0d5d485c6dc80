#include "net/web_page.hpp"

namespace troupe::net {

void add_web_page_routes(Router& router) {
  const auto serve_page = [](const HttpRequest&) {
    HttpResponse response;
    response.content_type = "text/html; charset=utf-8";
    response.body = std::string(chat_page_html());
    response.headers.emplace_back("Cache-Control", "no-cache");
    return response;
  };
  router.add("GET", "/", serve_page);
  router.add("GET", "/index.html", serve_page);
}

}  // namespace troupe::net
