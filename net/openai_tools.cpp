// Tool-calling fields of a chat request (see openai_tools.hpp). As in openai_request.cpp, an
// absent field and an explicit null are alike.
#include "net/openai_tools.hpp"

#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "net/json_input.hpp"
#include "net/openai_field_errors.hpp"

namespace troupe::net {
namespace {

namespace dom = simdjson::dom;
using Error = std::optional<ApiError>;
using model::ToolChoiceMode;
using openai_fields::bad_type;
using openai_fields::field;
using openai_fields::invalid;

Error missing(const std::string& param) {
  return invalid(param, fmt::format("'{}' is a required property.", param),
                 "missing_required_parameter");
}

// OpenAI's rule for function names; it also keeps a name plain text inside the call syntax.
bool valid_function_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Error read_name(dom::object o, const std::string& param, std::string& out) {
  const auto name = field(o, "name");
  if (!name) return missing(param);
  if (!name->is_string()) return bad_type(param, "a string");
  out = std::string(std::string_view(*name));
  if (!valid_function_name(out)) {
    return invalid(param, fmt::format("Invalid '{}': '{}' is not a function name (1 to 64 of "
                                      "a-z, A-Z, 0-9, underscores and dashes).", param, out));
  }
  return std::nullopt;
}

// The `{"type": "function", "function": {...}}` shape a tool and a tool call share: `type`, when
// present, must be "function"; `function` must be an object (returned in f).
Error read_function_object(dom::object o, const std::string& param, dom::object& f) {
  if (const auto type = field(o, "type");
      type && !(type->is_string() && std::string_view(*type) == "function")) {
    return invalid(param + ".type", fmt::format("Invalid value for '{}.type': only 'function' is "
                                                "supported.", param));
  }
  const auto function = field(o, "function");
  if (!function) return missing(param + ".function");
  if (!function->is_object()) return bad_type(param + ".function", "an object");
  f = dom::object(*function);
  return std::nullopt;
}

Error read_tool(dom::element e, const std::string& param, model::ToolDefinition& tool) {
  if (!e.is_object()) return bad_type(param, "an object");
  const dom::object o(e);
  if (!field(o, "type")) return missing(param + ".type");
  dom::object f;
  if (auto err = read_function_object(o, param, f)) return err;
  if (auto err = read_name(f, param + ".function.name", tool.name)) return err;
  if (const auto description = field(f, "description"); description && !description->is_string()) {
    return bad_type(param + ".function.description", "a string");
  }
  if (const auto strict = field(f, "strict"); strict && !strict->is_bool()) {
    return bad_type(param + ".function.strict", "a boolean");
  }
  if (const auto parameters = field(f, "parameters")) {
    if (!parameters->is_object()) {
      return bad_type(param + ".function.parameters", "a JSON schema object");
    }
    tool.parameters = simdjson::minify(*parameters);
  }
  tool.json = simdjson::minify(e);
  if (const auto bad = first_invalid_utf8(tool.json)) {
    return invalid(param, fmt::format("'{}' is not valid UTF-8 (invalid byte at offset {}).", param,
                                      *bad), "invalid_utf8");
  }
  return std::nullopt;
}

Error read_tool_list(dom::object body, std::vector<model::ToolDefinition>& tools) {
  const auto e = field(body, "tools");
  if (!e) return std::nullopt;
  if (!e->is_array()) return bad_type("tools", "an array");
  size_t index = 0;
  for (dom::element item : dom::array(*e)) {
    const std::string param = fmt::format("tools[{}]", index++);
    model::ToolDefinition tool;
    if (auto err = read_tool(item, param, tool)) return err;
    for (const model::ToolDefinition& earlier : tools) {
      if (earlier.name == tool.name) {
        return invalid(param + ".function.name",
                       fmt::format("Duplicate function name '{}' in 'tools'.", tool.name));
      }
    }
    tools.push_back(std::move(tool));
  }
  return std::nullopt;
}

Error read_tool_choice(dom::object body, const std::vector<model::ToolDefinition>& tools,
                       model::ToolChoice& choice) {
  choice.mode = tools.empty() ? ToolChoiceMode::kNone : ToolChoiceMode::kAuto;
  const auto e = field(body, "tool_choice");
  if (!e) return std::nullopt;
  if (e->is_string()) {
    const std::string_view mode(*e);
    if (mode == "none") {
      choice.mode = ToolChoiceMode::kNone;
    } else if (mode == "auto") {
      choice.mode = ToolChoiceMode::kAuto;
    } else if (mode == "required") {
      choice.mode = ToolChoiceMode::kRequired;
    } else {
      return invalid("tool_choice", fmt::format("Invalid value for 'tool_choice': '{}' is not one "
                                                "of 'none', 'auto', 'required' or a function.",
                                                mode));
    }
  } else if (e->is_object()) {
    const dom::object o(*e);
    const auto type = field(o, "type");
    if (!type) return missing("tool_choice.type");
    if (!type->is_string() || std::string_view(*type) != "function") {
      return invalid("tool_choice.type", "Invalid value for 'tool_choice.type': only 'function' "
                                         "is supported.");
    }
    const auto function = field(o, "function");
    if (!function) return missing("tool_choice.function");
    if (!function->is_object()) return bad_type("tool_choice.function", "an object");
    const auto name = field(dom::object(*function), "name");
    if (!name) return missing("tool_choice.function.name");
    if (!name->is_string()) return bad_type("tool_choice.function.name", "a string");
    choice.mode = ToolChoiceMode::kNamed;
    choice.name = std::string(std::string_view(*name));
    bool known = false;
    for (const model::ToolDefinition& tool : tools) known = known || tool.name == choice.name;
    if (!known && !tools.empty()) {
      return invalid("tool_choice.function.name",
                     fmt::format("Invalid 'tool_choice': no function named '{}' in 'tools'.",
                                 choice.name));
    }
  } else {
    return bad_type("tool_choice", "a string or an object");
  }
  if (tools.empty() && choice.mode != ToolChoiceMode::kNone) {
    return invalid("tool_choice", "'tool_choice' is only allowed when 'tools' are given.");
  }
  return std::nullopt;
}

Error read_call(dom::element e, const std::string& param, model::ToolCall& call) {
  if (!e.is_object()) return bad_type(param, "an object");
  const dom::object o(e);
  if (const auto id = field(o, "id")) {
    if (!id->is_string()) return bad_type(param + ".id", "a string");
    call.id = std::string(std::string_view(*id));
  }
  dom::object f;
  if (auto err = read_function_object(o, param, f)) return err;
  const auto name = field(f, "name");
  if (!name) return missing(param + ".function.name");
  if (!name->is_string()) return bad_type(param + ".function.name", "a string");
  call.name = std::string(std::string_view(*name));
  const auto arguments = field(f, "arguments");
  if (!arguments) return missing(param + ".function.arguments");
  if (arguments->is_string()) {
    call.arguments = std::string(std::string_view(*arguments));
  } else if (arguments->is_object()) {  // some clients send the object itself
    call.arguments = simdjson::minify(*arguments);
  } else {
    return bad_type(param + ".function.arguments", "a string holding a JSON object");
  }
  for (const std::string* text : {&call.id, &call.name, &call.arguments}) {
    if (const auto bad = first_invalid_utf8(*text)) {
      return invalid(param, fmt::format("'{}' is not valid UTF-8 (invalid byte at offset {}).",
                                        param, *bad), "invalid_utf8");
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> read_tools(dom::object body, ApiKind kind, engine::GenerateRequest& request) {
  if (kind != ApiKind::kChat) {
    for (std::string_view key : {"tools", "tool_choice", "parallel_tool_calls"}) {
      if (field(body, key)) {
        return invalid(std::string(key), fmt::format("'{}' is only supported on "
                                                     "/v1/chat/completions.", key));
      }
    }
    return std::nullopt;
  }
  if (auto err = read_tool_list(body, request.tools)) return err;
  if (auto err = read_tool_choice(body, request.tools, request.tool_choice)) return err;
  if (const auto parallel = field(body, "parallel_tool_calls")) {
    if (!parallel->is_bool()) return bad_type("parallel_tool_calls", "a boolean");
    request.tool_choice.parallel = bool(*parallel);
  }
  return std::nullopt;
}

std::optional<ApiError> read_message_tool_fields(dom::object item, const std::string& param,
                                                 model::ChatMessage& message) {
  if (const auto id = field(item, "tool_call_id")) {
    if (!id->is_string()) return bad_type(param + ".tool_call_id", "a string");
    message.tool_call_id = std::string(std::string_view(*id));
  }
  const auto calls = field(item, "tool_calls");
  if (!calls) return std::nullopt;
  if (message.role != "assistant") {
    return invalid(param + ".tool_calls", "'tool_calls' is only allowed on assistant messages.");
  }
  if (!calls->is_array()) return bad_type(param + ".tool_calls", "an array");
  size_t index = 0;
  for (dom::element e : dom::array(*calls)) {
    const std::string call_param = fmt::format("{}.tool_calls[{}]", param, index++);
    model::ToolCall call;
    if (auto err = read_call(e, call_param, call)) return err;
    message.tool_calls.push_back(std::move(call));
  }
  return std::nullopt;
}

std::optional<ApiError> check_tools_combination(const engine::GenerateRequest& request) {
  if (!request.parses_tool_calls()) return std::nullopt;
  if (request.structured_output) {
    return invalid(request.structured_output_field,
                   fmt::format("'{}' cannot be combined with 'tools' (unless tool_choice is "
                               "\"none\"): the tool calls are the constrained output.",
                               request.structured_output_field));
  }
  if (request.kv_transfer) {
    return invalid("kv_transfer_params", "'kv_transfer_params' cannot be combined with 'tools'.");
  }
  return std::nullopt;
}

}  // namespace troupe::net
