// Constrained decoding on the device: the step's grammar bitmask rows applied to sampling rows of
// logits (disallowed tokens -> -inf), before logit_bias, penalties, top-k/top-p/min-p,
// temperature and greedy. The CPU twin is gpu/cpu/token_mask.hpp (same semantics, compared in
// tests/gpu/cuda_ops_test.cpp); the layout is model/grammar/token_bitmask.hpp's (xgrammar's):
// bit t % 32 of word t / 32, 1 = allowed; token ids past a row's 32 * num_words bits are
// disallowed, as on the CPU.
//
// One thread per token and row, as xgrammar's apply_token_bitmask_inplace_cuda: rows are picked
// through a per-row index into the bitmask (-1: unconstrained, never read nor written), so the
// scheduler's rows go up unchanged, one word per 32 tokens. Out of place (`out` != `in`): the
// sampler masks its working copy and keeps the raw logits for logprobs (sampler.hpp's raw
// logprobs); in place when `out` == `in`.
//
// Thread-safety: enqueues on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace troupe::gpu::cuda {

struct TokenMaskArgs {
  const float* in = nullptr;             // [num_rows][n_vocab]
  float* out = nullptr;                  // [num_rows][n_vocab]; may be `in`
  int32_t num_rows = 0;
  int32_t n_vocab = 0;
  const uint32_t* bitmask = nullptr;     // [bitmask rows][num_words]
  int32_t num_words = 0;
  const int32_t* bitmask_rows = nullptr;  // [num_rows]: the row's bitmask row, -1: unconstrained
};

// out[r][t] = in[r][t] where row r's bitmask allows t, else -inf, for every row r with
// bitmask_rows[r] >= 0; rows with -1 are left as they are in `out`.
void apply_token_bitmask(const TokenMaskArgs& args, cudaStream_t stream);

}  // namespace troupe::gpu::cuda
