// The web chat page (GET /): one static HTML file with a little vanilla JavaScript that chats
// over /v1/chat/ws. No build step and no external assets.
//
// Thread-safety: immutable data; any thread.
#pragma once

#include <string_view>

#include "net/router.hpp"

namespace troupe::net {

std::string_view chat_page_html();

// GET / and GET /index.html.
void add_web_page_routes(Router& router);

}  // namespace troupe::net
