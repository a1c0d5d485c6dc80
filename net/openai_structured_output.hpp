// Decodes the structured-output fields of an OpenAI request body (issue 19) into
// engine::GenerateRequest::structured_output (tool calling is openai_tools.hpp). Shared by /v1/chat/completions, /v1/completions, /v1/batch items and
// the WebSocket chat (all go through parse_completion_request).
//
//   response_format     {"type":"text"}                     no constraint
//                       {"type":"json_object"}              any JSON object
//                       {"type":"json_schema","json_schema":{"name":..,"schema":{..},"strict":..}}
//   structured_outputs  {"json": schema object or string} | {"regex": ".."} |
//                       {"choice": ["a", "b"]} | {"grammar": "EBNF"} | {"json_object": true}
//                       (vLLM; exactly one key)
//   guided_json, guided_regex, guided_choice, guided_grammar   (vLLM's older top-level names)
//
// At most one of them may constrain a request; two is a 400 naming the second. A schema given
// as an object is minified (so equal schemas share one compiled grammar in the cache). Whether
// a schema, regex or grammar compiles is checked later, on a prompt worker (a 400 naming the
// field too).
//
// Thread-safety: pure functions.
#pragma once

#include <simdjson.h>

#include <optional>

#include "actors/messages/engine_types.hpp"
#include "net/http_types.hpp"

namespace troupe::net {

std::optional<ApiError> read_structured_output(simdjson::dom::object body,
                                               engine::GenerateRequest& request);

}  // namespace troupe::net
