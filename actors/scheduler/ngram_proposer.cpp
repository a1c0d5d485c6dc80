// Prompt-lookup drafts (see ngram_proposer.hpp).
#include "actors/scheduler/ngram_proposer.hpp"

#include <algorithm>

namespace troupe::scheduler {

void propose_ngram(std::span<const int32_t> tokens, const NgramLookup& lookup,
                   std::vector<int32_t>& draft) {
  draft.clear();
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t max_n = std::min<int64_t>(lookup.max_n, n - 1);
  if (lookup.max_tokens <= 0 || lookup.min_n < 1 || max_n < lookup.min_n) return;
  const int32_t last = tokens[static_cast<size_t>(n - 1)];
  // One scan from the end: every earlier position `end` holding the last token is a match of
  // some length; the longest wins, and among equals the first met (the most recent).
  int64_t best_end = -1;
  int64_t best_len = 0;
  for (int64_t end = n - 2; end >= 0; --end) {
    if (tokens[static_cast<size_t>(end)] != last) continue;
    int64_t len = 1;
    while (len < max_n && end - len >= 0 &&
           tokens[static_cast<size_t>(end - len)] == tokens[static_cast<size_t>(n - 1 - len)]) {
      ++len;
    }
    if (len > best_len) {
      best_len = len;
      best_end = end;
      if (len == max_n) break;  // nothing longer is looked for
    }
  }
  if (best_end < 0 || best_len < lookup.min_n) return;
  const int64_t first = best_end + 1;  // <= n - 1: at least one token follows the match
  const int64_t count = std::min<int64_t>(lookup.max_tokens, n - first);
  draft.assign(tokens.begin() + first, tokens.begin() + first + count);
}

}  // namespace troupe::scheduler
