// GrammarSpec's cache key and size (see grammar_spec.hpp).
#include "model/grammar/grammar_spec.hpp"

namespace troupe::model::grammar {

std::string_view grammar_kind_name(GrammarKind kind) {
  switch (kind) {
    case GrammarKind::kJsonObject: return "json_object";
    case GrammarKind::kJsonSchema: return "json_schema";
    case GrammarKind::kRegex: return "regex";
    case GrammarKind::kChoice: return "choice";
    case GrammarKind::kEbnf: return "ebnf";
    case GrammarKind::kStructuralTag: return "structural_tag";
  }
  return "unknown";
}

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
