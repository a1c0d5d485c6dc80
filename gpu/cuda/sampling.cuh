// Token sampling on the device, one thread block per sampling row, with the CPU reference's
// chain and semantics (gpu/cpu/sampler.hpp): the structured-output token bitmask (token_mask.cuh,
// its own kernel launched first), logit_bias, then the min_tokens mask of the
// end-of-generation ids (for greedy too), then greedy argmax (ties to the lower id), or penalties ->
// top-k -> top-p -> min-p -> temperature -> a draw with the uniform number of (seed,
// num_generated) — the same counter-based generator as the CPU (splitmix64), so a preempted and
// recomputed sequence draws the same numbers on either backend. Logprobs of the raw logits
// (before the bitmask, bias and mask, as on the CPU).
//
// No sort: top-k and top-p cut a prefix of the rank order (value descending, then id
// ascending), found by bisection over order-preserving float keys and then over ids among ties;
// the draw walks that rank order when the CPU would have sorted (top-k or top-p on) and id order
// otherwise, as the CPU does. Given equal logits the two backends agree except where float
// summation order moves a cumulative sum across the draw's target.
//
// Thread-safety: enqueues on `stream`; `workspace` is scratch owned by the caller.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace troupe::gpu::cuda {

constexpr int32_t kMaxTopLogprobs = 20;

// One sampling row's inputs, plain data copied to the device with the step's inputs.
struct SamplingRowParams {
  uint64_t seed = 0;
  float temperature = 0.0f;  // <= 0: greedy
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t penalty_last_n = 64;
  int32_t num_generated = 0;
  int32_t recent_offset = 0;  // penalty window in recent_tokens
  int32_t recent_count = 0;
  int32_t num_top_logprobs = 0;  // <= kMaxTopLogprobs
  int32_t want_logprob = 0;
  int32_t bias_offset = 0;  // logit_bias entries in bias_ids/bias_values (unique ids)
  int32_t bias_count = 0;
  int32_t end_offset = 0;   // end-of-generation ids to mask this step, in end_token_ids;
  int32_t end_count = 0;    // 0 once min_tokens is reached (the host decides, as the CPU does)
};

struct SamplingArgs {
  const float* logits = nullptr;             // [num_rows][n_vocab]
  int32_t num_rows = 0;
  int32_t n_vocab = 0;
  const SamplingRowParams* params = nullptr;  // [num_rows], device memory
  const int32_t* recent_tokens = nullptr;
  const int32_t* bias_ids = nullptr;         // logit_bias of every row, concatenated
  const float* bias_values = nullptr;
  const int32_t* end_token_ids = nullptr;    // masked end ids of every row, concatenated
  // Structured output: the step's grammar bitmask rows (model/grammar/token_bitmask.hpp) and
  // each sampling row's index into them ([num_rows], -1: unconstrained). bitmask == nullptr: no
  // row is constrained, and nothing is launched for the mask.
  const uint32_t* bitmask = nullptr;
  int32_t bitmask_num_words = 0;
  const int32_t* bitmask_rows = nullptr;
  float* workspace = nullptr;                // [num_rows][n_vocab]
  int32_t* out_tokens = nullptr;             // [num_rows]
  float* out_logprobs = nullptr;             // [num_rows]
  int32_t* out_top_ids = nullptr;            // [num_rows][kMaxTopLogprobs]
  float* out_top_logprobs = nullptr;         // [num_rows][kMaxTopLogprobs]
};

// Masks the constrained rows into `workspace` (token_mask.cuh), then samples every row.
void sample_rows(const SamplingArgs& args, cudaStream_t stream);

}  // namespace troupe::gpu::cuda
