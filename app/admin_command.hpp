// `troupe admin`: the command-line client of the admin socket (net/admin_server.hpp). It sends
// one JSON command line, prints the reply as text (or raw with --json), and for `watch` keeps a
// compact live table, redrawn in place when stdout is a terminal.
//
// Thread-safety: run from main; writes to std::cout / std::cerr.
#pragma once

#include <string>
#include <vector>

namespace troupe::app {

// `args` are the words after `troupe admin` (a leading "admin" is skipped too). Exit codes:
// 0 ok, 1 the server replied with an error or no server is listening, 2 usage error.
int run_admin(const std::vector<std::string>& args);

std::string admin_usage_text();

}  // namespace troupe::app
