// Runs a /v1/batch request: every valid item is submitted to the engine at once, and results
// leave in input order (JSONL: each line as soon as it and all before it are done).
//
// Thread-safety: start from an io thread; item sinks complete on the engine's ingress thread.
#pragma once

#include <memory>

#include "net/http_types.hpp"
#include "net/openai_sink.hpp"

namespace troupe::net {

void handle_batch(const std::shared_ptr<OpenAiContext>& context, const HttpRequest& request,
                  const std::shared_ptr<ResponseStream>& out);

}  // namespace troupe::net
