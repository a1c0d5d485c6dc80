// Stop conditions: EOS, stop token ids, max_tokens, max_model_len (see stop_checker.hpp).
#include "actors/scheduler/stop_checker.hpp"

#include <algorithm>

namespace troupe::scheduler {

std::optional<FinishReason> check_stop(const Sequence& seq,
                                       std::span<const int32_t> eos_token_ids,
                                       int32_t max_model_len) {
  if (seq.num_generated_tokens() <= 0) return std::nullopt;
  const int32_t token = seq.token_ids.back();
  // ignore_eos turns off only the model's end-of-generation ids, never explicit stop ids.
  if (!seq.stop.ignore_eos &&
      std::find(eos_token_ids.begin(), eos_token_ids.end(), token) != eos_token_ids.end()) {
    return FinishReason::kEos;
  }
  const auto& stop_ids = seq.stop.stop_token_ids;
  if (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
    return FinishReason::kStopToken;
  }
  if (seq.num_generated_tokens() >= seq.stop.max_tokens) return FinishReason::kMaxTokens;
  if (seq.num_tokens() >= max_model_len) return FinishReason::kMaxModelLen;
  return std::nullopt;
}


// check_stop, except that an end-of-generation token before min_tokens does not finish the
// sequence. The backend masks those ids until then, so this only matters if one reaches us
// anyway (a backend bug, or every other logit at -inf): min_tokens still holds.
std::optional<FinishReason> check_stop_after_min_tokens(const Sequence& seq,
                                                        std::span<const int32_t> eos_token_ids,
                                                        int32_t max_model_len) {
  const auto reason = check_stop(seq, eos_token_ids, max_model_len);
  const bool early = seq.num_generated_tokens() < seq.sampling.min_tokens;
  if (!early || !reason || (*reason != FinishReason::kEos && *reason != FinishReason::kStopToken)) {
    return reason;
  }
  // The token is ordinary output now; only the length limits may still end the sequence.
  if (seq.num_generated_tokens() >= seq.stop.max_tokens) return FinishReason::kMaxTokens;
  if (seq.num_tokens() >= max_model_len) return FinishReason::kMaxModelLen;
  return std::nullopt;
}

}  // namespace troupe::scheduler
