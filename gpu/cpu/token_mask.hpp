// Constrained decoding on the CPU: a grammar's token bitmask applied to one row of logits before
// the sampling chain (sampler.hpp), so greedy, top-k, top-p, min-p and the seeded draw all see
// only the tokens the grammar allows. The bitmask layout is model/grammar/token_bitmask.hpp's
// (xgrammar's): bit t % 32 of word t / 32, 1 = allowed.
//
// The CUDA sampler takes the same bitmask, unchanged: the step's rows of ceil(vocab / 32) uint32
// words and each sampling row's index into them travel with the step's packed inputs (one
// cudaMemcpyAsync from pinned memory); gpu/cuda/token_mask.cu (one thread per token, rows picked
// by that index, as xgrammar's apply_token_bitmask_inplace_cuda) writes -inf into the disallowed
// logits of the sampler's working copy before the sampling kernel, and unconstrained rows are
// never touched. tests/gpu/cuda_token_mask_test.cpp compares it with this function.
//
// Logprobs stay those of the raw row (sampler.hpp): apply the mask to the sampler's working copy.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

namespace troupe::gpu::cpu {

// Sets logits[t] = -inf for every token t the bitmask row disallows; allowed logits are left
// bit-for-bit as they were. Tokens past the row's 32 * bitmask.size() bits count as disallowed
// (a mask narrower than the logits row never lets an unknown id through); bits past
// logits.size() are ignored. Returns the number of allowed tokens in the row.
int32_t apply_token_bitmask(std::span<float> logits, std::span<const uint32_t> bitmask);

}  // namespace troupe::gpu::cpu
