// GrammarSpec's cache key and size (see grammar_spec.hpp).
#include "model/grammar/grammar_spec.hpp"

#include "model/enum_names.hpp"

namespace troupe::model::grammar {

constexpr EnumNames<GrammarKind, 6> kGrammarKindNames{{{
    {GrammarKind::kJsonObject, "json_object"}, {GrammarKind::kJsonSchema, "json_schema"},
    {GrammarKind::kRegex, "regex"}, {GrammarKind::kChoice, "choice"},
    {GrammarKind::kEbnf, "ebnf"}, {GrammarKind::kStructuralTag, "structural_tag"}}}};
static_assert(kGrammarKindNames.dense());

std::string_view grammar_kind_name(GrammarKind kind) { return kGrammarKindNames.name(kind); }

std::string GrammarSpec::cache_key() const {
  std::string key(grammar_kind_name(kind));
  key.push_back('\n');
  if (kind == GrammarKind::kChoice) {
    for (const std::string& c : choices) {
      key += std::to_string(c.size());
      key.push_back(':');
      key += c;
    }
  } else {
    key += source;
  }
  return key;
}

size_t GrammarSpec::source_bytes() const {
  size_t n = source.size();
  for (const std::string& c : choices) n += c.size();
  return n;
}

}  // namespace troupe::model::grammar
