// Structured-output fields (see openai_structured_output.hpp). As in
// openai_request.cpp, an absent field and an explicit null are alike.
#include "net/openai_structured_output.hpp"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "net/json_input.hpp"
#include "net/openai_field_errors.hpp"

namespace troupe::net {
namespace {

namespace dom = simdjson::dom;
using model::grammar::GrammarSpec;
using Error = std::optional<ApiError>;
using openai_fields::bad_type;
using openai_fields::field;
using openai_fields::invalid;

Error check_text(const std::string& param, std::string_view text) {
  if (const auto bad = first_invalid_utf8(text)) {
    return invalid(param, fmt::format("'{}' is not valid UTF-8 (invalid byte at offset {}).", param,
                                      *bad),
                   "invalid_utf8");
  }
  return std::nullopt;
}

// A JSON schema: an object (minified, so equal schemas share a cache entry) or a string holding
// one (checked by the compiler).
Error read_schema(dom::element e, const std::string& param, GrammarSpec& out) {
  if (e.is_object()) {
    out = GrammarSpec::json_schema(simdjson::minify(e));
    return std::nullopt;
  }
  if (e.is_string()) {
    const std::string_view text(e);
    if (text.empty()) return invalid(param, fmt::format("'{}' must not be empty.", param));
    if (auto err = check_text(param, text)) return err;
    out = GrammarSpec::json_schema(std::string(text));
    return std::nullopt;
  }
  return bad_type(param, "a JSON schema (an object, or a string holding one)");
}

Error read_nonempty_string(dom::element e, const std::string& param, std::string& out) {
  if (!e.is_string()) return bad_type(param, "a string");
  out = std::string(std::string_view(e));
  if (out.empty()) return invalid(param, fmt::format("'{}' must not be empty.", param));
  return check_text(param, out);
}

Error read_choices(dom::element e, const std::string& param, GrammarSpec& out) {
  if (!e.is_array()) return bad_type(param, "an array of strings");
  std::vector<std::string> choices;
  for (dom::element item : dom::array(e)) {
    if (!item.is_string()) return bad_type(param, "an array of strings");
    choices.emplace_back(std::string_view(item));
    if (auto err = check_text(param, choices.back())) return err;
  }
  if (choices.empty()) return invalid(param, fmt::format("'{}' must hold at least one string.", param));
  out = GrammarSpec::choice(std::move(choices));
  return std::nullopt;
}

// One constraint of vLLM's kinds: "json", "regex", "choice", "grammar", "json_object".
Error read_vllm_kind(std::string_view kind, dom::element e, const std::string& param,
                     std::optional<GrammarSpec>& out) {
  GrammarSpec spec;
  std::string text;
  if (kind == "json") {
    if (auto err = read_schema(e, param, spec)) return err;
  } else if (kind == "regex") {
    if (auto err = read_nonempty_string(e, param, text)) return err;
    spec = GrammarSpec::regex(std::move(text));
  } else if (kind == "choice") {
    if (auto err = read_choices(e, param, spec)) return err;
  } else if (kind == "grammar") {
    if (auto err = read_nonempty_string(e, param, text)) return err;
    spec = GrammarSpec::ebnf(std::move(text));
  } else {  // json_object
    if (!e.is_bool()) return bad_type(param, "a boolean");
    if (!bool(e)) return std::nullopt;  // false: no constraint
    spec = GrammarSpec::json_object();
  }
  out = std::move(spec);
  return std::nullopt;
}

constexpr std::string_view kVllmKinds[] = {"json", "regex", "choice", "grammar", "json_object"};

Error read_structured_outputs(dom::element e, std::optional<GrammarSpec>& out) {
  const std::string param = "structured_outputs";
  if (!e.is_object()) return bad_type(param, "an object");
  std::optional<std::string> chosen;
  for (const dom::key_value_pair entry : dom::object(e)) {
    const std::string key_param = fmt::format("{}.{}", param, entry.key);
    if (entry.value.is_null()) continue;
    bool known = false;
    for (std::string_view kind : kVllmKinds) known = known || kind == entry.key;
    if (!known) {
      return invalid(key_param, fmt::format("'{}' is not supported (one of json, regex, choice, "
                                            "grammar, json_object).", key_param));
    }
    if (chosen) {
      return invalid(key_param, fmt::format("'{}' holds both '{}' and '{}': give exactly one "
                                            "constraint.", param, *chosen, entry.key));
    }
    chosen = std::string(entry.key);
    if (auto err = read_vllm_kind(entry.key, entry.value, key_param, out)) return err;
  }
  if (!chosen) {
    return invalid(param, "'structured_outputs' needs one of json, regex, choice, grammar, "
                          "json_object.");
  }
  return std::nullopt;
}

Error read_response_format(dom::element e, std::optional<GrammarSpec>& out) {
  if (!e.is_object()) return bad_type("response_format", "an object");
  const dom::object format(e);
  const auto type = field(format, "type");
  if (!type) {
    return invalid("response_format.type", "'response_format.type' is a required property.",
                   "missing_required_parameter");
  }
  if (!type->is_string()) return bad_type("response_format.type", "a string");
  const std::string_view kind(*type);
  if (kind == "text") return std::nullopt;
  if (kind == "json_object") {
    out = GrammarSpec::json_object();
    return std::nullopt;
  }
  if (kind != "json_schema") {
    return invalid("response_format.type",
                   fmt::format("Invalid value for 'response_format.type': '{}' is not one of "
                               "'text', 'json_object', 'json_schema'.", kind));
  }
  const auto json_schema = field(format, "json_schema");
  if (!json_schema) {
    return invalid("response_format.json_schema",
                   "'response_format.json_schema' is required when type is 'json_schema'.",
                   "missing_required_parameter");
  }
  if (!json_schema->is_object()) return bad_type("response_format.json_schema", "an object");
  const dom::object body(*json_schema);
  if (const auto name = field(body, "name"); name && !name->is_string()) {
    return bad_type("response_format.json_schema.name", "a string");
  }
  if (const auto strict = field(body, "strict"); strict && !strict->is_bool()) {
    return bad_type("response_format.json_schema.strict", "a boolean");
  }
  const auto schema = field(body, "schema");
  if (!schema) {  // OpenAI's schema is optional: without one, any JSON object
    out = GrammarSpec::json_object();
    return std::nullopt;
  }
  if (!schema->is_object()) return bad_type("response_format.json_schema.schema", "an object");
  GrammarSpec spec;
  if (auto err = read_schema(*schema, "response_format.json_schema.schema", spec)) return err;
  out = std::move(spec);
  return std::nullopt;
}

struct Source {
  std::string_view field;
  std::string_view vllm_kind;  // for the guided_* names; "" otherwise
};
constexpr Source kSources[] = {
    {"response_format", ""},      {"structured_outputs", ""}, {"guided_json", "json"},
    {"guided_regex", "regex"},    {"guided_choice", "choice"}, {"guided_grammar", "grammar"},
};

}  // namespace

std::optional<ApiError> read_structured_output(dom::object body, engine::GenerateRequest& request) {
  for (const Source& source : kSources) {
    const auto e = field(body, source.field);
    if (!e) continue;
    const std::string param(source.field);
    std::optional<GrammarSpec> spec;
    Error err;
    if (source.field == "response_format") {
      err = read_response_format(*e, spec);
    } else if (source.field == "structured_outputs") {
      err = read_structured_outputs(*e, spec);
    } else {
      err = read_vllm_kind(source.vllm_kind, *e, param, spec);
    }
    if (err) return err;
    if (!spec) continue;  // {"type":"text"}, {"json_object": false}
    if (request.structured_output) {
      return invalid(param, fmt::format("'{}' and '{}' both constrain the output: give only one.",
                                        request.structured_output_field, param));
    }
    request.structured_output = std::move(spec);
    request.structured_output_field = param;
  }
  return std::nullopt;
}

}  // namespace troupe::net
