// Prompt-lookup drafts (vLLM's `ngram` speculative method, llama.cpp's lookup decoding): the
// sequence's last n tokens, for the longest n in [min_n, max_n] that occurs earlier in the
// sequence (prompt and output alike), are found at their most recent earlier occurrence, and
// the tokens that followed it there are proposed as the continuation.
//
//   tokens:  ... a b c d e ... x y a b c
//                  └match┘└ proposal (up to k) ┘       suffix "a b c" (n = 3)
//
// A model-free guess, cheap enough to run for every decoding sequence every step: one
// backwards scan over the tokens, no allocation (the caller's vector keeps its capacity).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace troupe::scheduler {

struct NgramLookup {
  int32_t min_n = 1;
  int32_t max_n = 1;
  int32_t max_tokens = 0;  // k: tokens to propose at most
};

// Fills `draft` (cleared first) with up to lookup.max_tokens tokens following the most recent
// earlier occurrence of the longest suffix of `tokens` of length in [min_n, max_n]; empty when
// no such suffix occurs earlier, or max_tokens <= 0.
void propose_ngram(std::span<const int32_t> tokens, const NgramLookup& lookup,
                   std::vector<int32_t>& draft);

}  // namespace troupe::scheduler
