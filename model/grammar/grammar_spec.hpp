// What a request asks its output to match (issue 19): the kinds vLLM and OpenAI clients send
// (`response_format` json_object / json_schema, `structured_outputs` regex / choice / grammar),
// as plain text, before any compilation. Built by the API layer, compiled by GrammarCompiler
// (model/grammar/grammar_compiler.hpp) on a worker thread, cached by cache_key().
//
// Thread-safety: a plain value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::model::grammar {

enum class GrammarKind : uint8_t {
  kJsonObject,  // any JSON object (OpenAI's {"type":"json_object"})
  kJsonSchema,  // a JSON schema document (text)
  kRegex,       // a regular expression the whole output matches
  kChoice,      // exactly one of a list of strings
  kEbnf,        // an xgrammar EBNF (GBNF-like) grammar whose root rule is `root`
  kStructuralTag,  // an xgrammar structural tag (JSON): tool calls (model/tool_calling.hpp)
};

std::string_view grammar_kind_name(GrammarKind kind);

struct GrammarSpec {
  GrammarKind kind = GrammarKind::kJsonObject;
  std::string source;                // schema / regex / EBNF text; empty for the other kinds
  std::vector<std::string> choices;  // kChoice only

  static GrammarSpec json_object() { return {GrammarKind::kJsonObject, {}, {}}; }
  static GrammarSpec json_schema(std::string schema) {
    return {GrammarKind::kJsonSchema, std::move(schema), {}};
  }
  static GrammarSpec regex(std::string pattern) {
    return {GrammarKind::kRegex, std::move(pattern), {}};
  }
  static GrammarSpec choice(std::vector<std::string> choices) {
    return {GrammarKind::kChoice, {}, std::move(choices)};
  }
  static GrammarSpec ebnf(std::string grammar) {
    return {GrammarKind::kEbnf, std::move(grammar), {}};
  }
  static GrammarSpec structural_tag(std::string json) {
    return {GrammarKind::kStructuralTag, std::move(json), {}};
  }

  // Kind + exact source text; choices are length-prefixed, so ["a|b"] and ["a", "b"] differ.
  // NOTE: not canonicalised: two schemas that differ only in spacing or key order are two
  // entries (the API layer may minify a schema before building the spec).
  std::string cache_key() const;
  // The bytes of text the compiler has to read (bounded by GrammarCompilerConfig).
  size_t source_bytes() const;
};

}  // namespace troupe::model::grammar
