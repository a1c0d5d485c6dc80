// Per-request sampling and stopping parameters, as the wire formats (OpenAI, WebSocket) carry
// them after validation.
//
// Thread-safety: plain values; copy freely between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace troupe::model {

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

  bool greedy() const { return temperature <= 0.0f; }
};

struct StopConditions {
  int32_t max_tokens = 256;               // generated tokens, not counting the prompt
  bool ignore_eos = false;                // keep going past end-of-generation tokens
  std::vector<int32_t> stop_token_ids;    // extra ids that end generation
  std::vector<std::string> stop_strings;  // matched by the detokenizer (ingress), not the model
};

}  // namespace troupe::model
