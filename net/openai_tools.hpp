// Decodes the tool-calling fields of an OpenAI chat request (issue 19) into
// engine::GenerateRequest::tools / tool_choice, and the `tool_calls` of earlier assistant turns
// into model::ChatMessage. Every bad field is a 400 naming it:
//
//   tools                 [{"type":"function","function":{"name","description"?,"parameters"?,
//                         "strict"?}}]; name as OpenAI: 1-64 of [a-zA-Z0-9_-], unique;
//                         parameters a JSON schema object (whether it compiles is checked on
//                         the prompt worker: tools[i].function.parameters)
//   tool_choice           "none" | "auto" (default with tools) | "required" |
//                         {"type":"function","function":{"name"}} naming one of the tools;
//                         anything but "none" without tools is a 400
//   parallel_tool_calls   bool (default true); false: at most one call per turn
//
// Tools on /v1/completions, or combined with a structured-output field or kv_transfer_params,
// are a 400 too. With tool_choice "none" the tools are still rendered into the prompt (as vLLM
// does) but the output is neither constrained nor parsed.
//
// Thread-safety: pure functions.
#pragma once

#include <simdjson.h>

#include <optional>
#include <string>

#include "actors/messages/engine_types.hpp"
#include "net/http_types.hpp"
#include "net/openai_request.hpp"

namespace troupe::net {

std::optional<ApiError> read_tools(simdjson::dom::object body, ApiKind kind,
                                   engine::GenerateRequest& request);
// `messages[i].tool_calls` and `messages[i].tool_call_id` (param: "messages[i]").
std::optional<ApiError> read_message_tool_fields(simdjson::dom::object item,
                                                 const std::string& param,
                                                 model::ChatMessage& message);
// After the structured-output fields and kv_transfer_params are read: what tools cannot be
// combined with.
std::optional<ApiError> check_tools_combination(const engine::GenerateRequest& request);

}  // namespace troupe::net
