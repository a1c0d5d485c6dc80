// A request's prompt as the prompt workers built it (ingress/prompt_builder.hpp builds it; it
// comes back to the ingress actor as a message).
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace troupe::model::grammar {
class CompiledGrammar;
}

namespace troupe::ingress {

struct BuiltPrompt {
  std::vector<int32_t> token_ids;
  int32_t max_tokens = 0;  // effective: the request's, or the default, clamped to the context
  // The request's structured output, compiled (shared by its n choices); null: unconstrained.
  std::shared_ptr<const model::grammar::CompiledGrammar> grammar;
  // An embeddings request: each input's tokens (token_ids is then empty).
  std::vector<std::vector<int32_t>> inputs;
  // A request that echoes or scores its prompt (issue 37): the prompt's text as given, or its ids
  // detokenized — here on the prompt worker, not on the ingress thread every stream waits on.
  std::string echo_text;
};

}  // namespace troupe::ingress
