// When a sequence stops generating, decided right after each sampled token is appended.
//
// Thread-safety: pure functions; callable from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "actors/scheduler/sequence.hpp"

namespace troupe::scheduler {

// The reason `seq` (whose last token is the one just sampled) must stop, or nullopt.
// Order: EOS (unless ignore_eos), then the request's stop token ids, then max_tokens, then
// max_model_len: a model that chose to stop reports "stop" even on its last allowed token.
std::optional<FinishReason> check_stop(const Sequence& seq,
                                       std::span<const int32_t> eos_token_ids,
                                       int32_t max_model_len);

// check_stop, except that an end-of-generation token before min_tokens does not finish the
// sequence (the backend masks those ids until then).
std::optional<FinishReason> check_stop_after_min_tokens(const Sequence& seq,
                                                        std::span<const int32_t> eos_token_ids,
                                                        int32_t max_model_len);

}  // namespace troupe::scheduler
