// Tool-call grammars as xgrammar structural tags (see tool_calling.hpp).
#include "model/tool_calling.hpp"

#include <string>

#include "model/json_string.hpp"
#include "model/enum_names.hpp"

namespace troupe::model {

constexpr EnumNames<ToolCallFormat, 3> kToolCallFormatNames{{{
    {ToolCallFormat::kNone, "none"}, {ToolCallFormat::kHermes, "hermes"},
    {ToolCallFormat::kLlama3Json, "llama3_json"}}}, "none"};
static_assert(kToolCallFormatNames.dense());

std::string_view tool_call_format_name(ToolCallFormat format) { return kToolCallFormatNames.name(format); }

namespace {

struct Syntax {
  std::string_view begin_prefix;  // before the name
  std::string_view begin_suffix;  // after the name, up to the arguments
  std::string_view end;
  std::string_view separator;     // between parallel calls
  std::string_view trigger;       // auto: where a call starts
};

constexpr Syntax kHermes{"<tool_call>\n{\"name\": \"", "\", \"arguments\": ", "}\n</tool_call>",
                         "\n", "<tool_call>"};
constexpr Syntax kLlama3{"{\"name\": \"", "\", \"parameters\": ", "}", "; ", "{\"name\": \""};

void append_tag(const Syntax& syntax, const ToolDefinition& tool,
                std::optional<int32_t> max_whitespace, std::string& out) {
  out += R"({"type":"tag","begin":)";
  append_json_string(out, std::string(syntax.begin_prefix) + tool.name + std::string(syntax.begin_suffix));
  out += R"(,"content":{"type":"json_schema","json_schema":)";
  out += tool.parameters.empty() ? std::string(R"({"type":"object"})") : tool.parameters;
  if (max_whitespace) out += R"(,"max_whitespace_cnt":)" + std::to_string(*max_whitespace);
  out += R"(},"end":)";
  append_json_string(out, syntax.end);
  out += "}";
}

void append_tags(const Syntax& syntax, std::span<const ToolDefinition> tools,
                 std::optional<int32_t> max_whitespace, std::string& out) {
  out += R"("tags":[)";
  bool first = true;
  for (const ToolDefinition& tool : tools) {
    if (!first) out += ",";
    first = false;
    append_tag(syntax, tool, max_whitespace, out);
  }
  out += "]";
}

}  // namespace

std::optional<grammar::GrammarSpec> tool_call_grammar(ToolCallFormat format,
                                                      std::span<const ToolDefinition> tools,
                                                      const ToolChoice& choice,
                                                      std::optional<int32_t> json_max_whitespace) {
  if (format == ToolCallFormat::kNone || tools.empty() || choice.mode == ToolChoiceMode::kNone) {
    return std::nullopt;
  }
  const Syntax& syntax = format == ToolCallFormat::kHermes ? kHermes : kLlama3;
  const char* stop_after_first = choice.parallel ? "false" : "true";
  std::string out = R"({"type":"structural_tag","format":)";
  switch (choice.mode) {
    case ToolChoiceMode::kNamed: {
      const ToolDefinition* named = nullptr;
      for (const ToolDefinition& tool : tools) {
        if (tool.name == choice.name) named = &tool;
      }
      if (named == nullptr) return std::nullopt;  // the API layer refused it already
      append_tag(syntax, *named, json_max_whitespace, out);
      break;
    }
    case ToolChoiceMode::kRequired:
      out += R"({"type":"tags_with_separator",)";
      append_tags(syntax, tools, json_max_whitespace, out);
      out += R"(,"separator":)";
      append_json_string(out, syntax.separator);
      out += R"(,"at_least_one":true,"stop_after_first":)";
      out += stop_after_first;
      out += "}";
      break;
    case ToolChoiceMode::kAuto:
      out += R"({"type":"triggered_tags","triggers":[)";
      append_json_string(out, syntax.trigger);
      out += "],";
      append_tags(syntax, tools, json_max_whitespace, out);
      out += R"(,"at_least_one":false,"stop_after_first":)";
      out += stop_after_first;
      out += "}";
      break;
    case ToolChoiceMode::kNone: return std::nullopt;
  }
  out += "}";
  return grammar::GrammarSpec::structural_tag(std::move(out));
}

}  // namespace troupe::model
