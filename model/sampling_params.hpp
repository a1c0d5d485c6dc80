// Per-request sampling and stopping parameters, as the wire formats (OpenAI, WebSocket) carry
// them after validation.
//
// Thread-safety: plain values; copy freely between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace troupe::model {

// OpenAI's `logit_bias` range: -100 effectively bans a token, +100 effectively forces it.
inline constexpr float kMaxLogitBias = 100.0f;

// An additive bias on one token's logit, applied before every other step of the sampling chain
// (and before greedy argmax), as vLLM's logit-bias processor does.
struct LogitBias {
  int32_t token_id = 0;
  float bias = 0.0f;

  friend bool operator==(const LogitBias&, const LogitBias&) = default;
};

struct SamplingParams {
  float temperature = 1.0f;          // <= 0: greedy (argmax), every other knob ignored
  int32_t top_k = 0;                 // <= 0: off
  float top_p = 1.0f;                // 1: off
  float min_p = 0.0f;                // 0: off
  float repetition_penalty = 1.0f;   // 1: off (llama.cpp semantics, GGUF_NOTES.md §9)
  float presence_penalty = 0.0f;     // OpenAI semantics, over generated tokens
  float frequency_penalty = 0.0f;
  int32_t penalty_last_n = 64;       // window of recent tokens the penalties look at
  uint64_t seed = 0;                 // same seed + same prompt => same tokens
  int32_t top_logprobs = 0;          // alternatives returned per sampled token
  bool logprobs = false;             // return the sampled token's logprob
  // Sorted by token_id, one entry per token, each bias in [-kMaxLogitBias, kMaxLogitBias].
  std::vector<LogitBias> logit_bias;
  // vLLM's min_tokens: the end-of-generation ids (the model's EOS unless ignore_eos, and the
  // request's stop_token_ids) cannot be sampled before this many tokens were generated. It lives
  // here, not in StopConditions, because the sampler enforces it (by masking), not the stop check.
  int32_t min_tokens = 0;

  bool greedy() const { return temperature <= 0.0f; }
};

// What is wrong with a logit_bias list (nullopt: nothing): token ids must be in
// [0, vocab_size), unique and sorted; biases finite and within +-kMaxLogitBias. Shared by every
// wire format and by the admission check that knows the vocabulary.
inline std::optional<std::string> check_logit_bias(std::span<const LogitBias> entries,
                                                   int64_t vocab_size) {
  for (size_t i = 0; i < entries.size(); ++i) {
    const LogitBias& e = entries[i];
    if (e.token_id < 0 || e.token_id >= vocab_size) {
      return "token id " + std::to_string(e.token_id) + " is not in the vocabulary";
    }
    if (i > 0 && entries[i - 1].token_id >= e.token_id) {
      return "token id " + std::to_string(e.token_id) + " appears more than once";
    }
    // Written so that NaN fails too.
    if (!(e.bias >= -kMaxLogitBias && e.bias <= kMaxLogitBias)) {
      return "the bias of token " + std::to_string(e.token_id) + " is outside [-100, 100]";
    }
  }
  return std::nullopt;
}

struct StopConditions {
  int32_t max_tokens = 256;               // generated tokens, not counting the prompt
  bool ignore_eos = false;                // keep going past end-of-generation tokens
  std::vector<int32_t> stop_token_ids;    // extra ids that end generation
  std::vector<std::string> stop_strings;  // matched by the detokenizer (ingress), not the model
};

}  // namespace troupe::model
