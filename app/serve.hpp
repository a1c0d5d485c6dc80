// `troupe serve`: load the config, read the model, start the HTTP front, wait for SIGINT or
// SIGTERM, stop cleanly.
//
// Thread-safety: called once, from main.
#pragma once

#include "app/cli.hpp"
#include "app/config.hpp"

namespace troupe::app {

// Builds the effective config: file (if any) over the defaults, then flags. Throws ConfigError
// naming the key or flag.
ServerConfig resolve_config(const ServeOptions& options);

// Returns the process exit code.
int run_serve(const ServeOptions& options);

}  // namespace troupe::app
