// Token sampling from one row of logits: the structured-output token bitmask (token_mask.hpp;
// greedy too) -> logit_bias -> min_tokens mask of the end-of-generation
// ids (both for greedy too, as in vLLM), then greedy, or penalties -> top-k -> top-p -> min-p ->
// temperature -> seeded draw (llama.cpp's chain order, GGUF_NOTES.md §9), plus logprobs.
//
// Determinism: the random number for a draw depends only on (params.seed, num_generated), so a
// sequence that is preempted and recomputed samples the same tokens, and a request's output does
// not depend on what else is in the batch. Ties break toward the lower token id.
// Logprobs (and top alternatives) are those of the raw model distribution, log_softmax(logits),
// before the grammar's bitmask, logit_bias, the min_tokens mask, penalties, filters and
// temperature (vLLM v1's default logprobs_mode, raw_logprobs): a banned token still shows its
// model probability, and a constrained token's logprob is the unconstrained model's.
//
// Thread-safety: pure functions; a Sampler holds scratch buffers, one per thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gpu/step.hpp"

namespace troupe::gpu::cpu {

// The uniform number in [0, 1) used for the draw of token `num_generated` with `seed`.
double sampling_uniform(uint64_t seed, int32_t num_generated);

class Sampler {
 public:
  // `recent`: the slot's penalty window (oldest first); the last params.penalty_last_n entries
  // are penalized (penalty_last_n < 0: all of them, 0: none). `bitmask`: the slot's grammar
  // row (StepBatch::bitmask_of), empty when unconstrained.
  // `ahead`: the token sampled is the slot's (num_generated + ahead)-th (a verify span's
  // position after `ahead` accepted drafts): its random number and min_tokens mask are that
  // token's, exactly as a plain decode step of it would have them.
  SampledToken sample(std::span<const float> logits, const SamplingSlot& slot,
                      std::span<const int32_t> recent, std::span<const uint32_t> bitmask = {},
                      int32_t ahead = 0);

  // Speculative decoding: verifies `drafts` against `logits`, rows [drafts.size() + 1][vocab]
  // (the logits at the position before each draft, then after the last one). Row i is sampled
  // as its token would be without speculation (sample() with ahead = i, the penalty window
  // `recent` extended by drafts 0..i-1, which `recent_with_drafts` holds after `recent_count`
  // entries); draft i is kept while that sample equals it. Writes the tokens kept, the first
  // differing (or the one after the last draft) included, to `out`, and returns how many
  // (1 + drafts accepted; out.size() must be >= drafts.size() + 1).
  //
  // This is the standard speculative-sampling rule for a deterministic (one-hot) draft x:
  // the sample equals x with probability p(x), and otherwise is distributed as p without x,
  // renormalized; after every draft is accepted, the last row gives the bonus token. Because
  // each row's draw is the one plain decoding would make, the emitted tokens are exactly those
  // of decoding without speculation, greedy or seeded.
  int32_t sample_verified(std::span<const float> logits, int64_t vocab, const SamplingSlot& slot,
                          std::span<const int32_t> recent_with_drafts, int32_t recent_count,
                          std::span<const uint32_t> bitmask, std::span<const int32_t> drafts,
                          std::span<SampledToken> out);

  // Prompt logprobs (issue 37): `token`'s logprob in the raw distribution of one logits row —
  // the same arithmetic as a sampled token's logprob — its rank (1 + tokens with a strictly
  // higher logit) and the top_n best alternatives.
  ScoredToken score(std::span<const float> logits, int32_t token, int32_t top_n);

 private:
  void apply_penalties(const model::SamplingParams& params, std::span<const int32_t> recent);
  int32_t draw(const SamplingSlot& slot, int32_t ahead);  // over work_, after penalties
  void fill_logprobs(std::span<const float> logits, int32_t top_logprobs, SampledToken& out);

  std::vector<float> work_;
  std::vector<int32_t> ids_;
  std::vector<float> probs_;
  std::vector<int32_t> counts_;
};

}  // namespace troupe::gpu::cpu
