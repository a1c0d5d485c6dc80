// The grammar that enforces a request's tool_choice (issue 19): an xgrammar structural tag
// (GrammarKind::kStructuralTag) built from the tools' parameter schemas and the family's call
// syntax. The call's opening text up to its arguments, name included, is fixed text of the
// grammar; the arguments are the function's JSON schema.
//
//   Hermes (ChatML)   <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
//                     several calls: separated by "\n"
//   Llama 3 JSON      {"name": "NAME", "parameters": ARGS}      several: separated by "; "
//
//   required   one or more calls and nothing else (exactly one when !parallel)
//   named      exactly one call of that function
//   auto       free text; from the trigger on ("<tool_call>" / "{\"name\": \"") a call is
//              constrained, then free text again (llama.cpp's lazy grammar; with !parallel the
//              output ends after the first call)
//   none       no grammar (nullopt)
//
// NOTE: Llama 3's <|python_tag|> is a control token, which no grammar allows (TokenizerInfo):
// under a tool grammar a Llama 3 model writes its call as plain JSON, the format Meta's template
// asks for with custom tools.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <span>

#include "model/grammar/grammar_spec.hpp"
#include "model/tool_types.hpp"

namespace troupe::model {

// json_max_whitespace: the compiler's cap on JSON whitespace runs, written into each arguments
// schema of the tag (a structural tag does not take the compiler's JSON settings).
std::optional<grammar::GrammarSpec> tool_call_grammar(
    ToolCallFormat format, std::span<const ToolDefinition> tools, const ToolChoice& choice,
    std::optional<int32_t> json_max_whitespace = std::nullopt);

}  // namespace troupe::model
