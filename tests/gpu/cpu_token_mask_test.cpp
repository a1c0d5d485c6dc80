// Token bitmask application (gpu/cpu/token_mask.hpp): exactly the disallowed logits become -inf,
// allowed ones keep their bits, the layout is xgrammar's, and greedy sampling after the mask
// picks the best allowed token.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/cpu/sampler.hpp"
#include "gpu/cpu/token_mask.hpp"
#include "model/grammar/token_bitmask.hpp"

namespace troupe::gpu::cpu {
namespace {

using model::grammar::bitmask_num_words;
using model::grammar::token_allowed;
using model::grammar::TokenBitmask;

std::vector<float> random_logits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

TEST(TokenMask, SetsExactlyTheDisallowedLogitsToMinusInfinity) {
  for (const size_t vocab : {1u, 31u, 32u, 33u, 1000u, 49152u}) {
    const std::vector<float> original = random_logits(vocab, static_cast<uint32_t>(vocab));
    TokenBitmask mask(1, vocab);
    std::mt19937 rng(7);
    // Mixed words, all-zero words and all-one words: every branch of the kernel.
    for (size_t w = 0; w < mask.num_words(); ++w) {
      const uint32_t kind = rng() % 3;
      mask.row(0)[w] = kind == 0 ? 0u : kind == 1 ? ~0u : static_cast<uint32_t>(rng());
    }
    std::vector<float> logits = original;
    const int32_t num_allowed = apply_token_bitmask(logits, mask.row(0));
    int32_t expected_allowed = 0;
    for (size_t t = 0; t < vocab; ++t) {
      if (token_allowed(mask.row(0), static_cast<int32_t>(t))) {
        ++expected_allowed;
        EXPECT_EQ(bits_of(logits[t]), bits_of(original[t])) << "vocab " << vocab << " token " << t;
      } else {
        EXPECT_TRUE(std::isinf(logits[t]) && logits[t] < 0) << "vocab " << vocab << " token " << t;
      }
    }
    EXPECT_EQ(num_allowed, expected_allowed) << "vocab " << vocab;
  }
}

TEST(TokenMask, LayoutIsXgrammarsLeastSignificantBitFirst) {
  std::vector<float> logits(64, 1.0f);
  std::vector<uint32_t> mask(bitmask_num_words(64), 0);
  mask[0] = 1u << 5;   // token 5
  mask[1] = 1u << 31;  // token 63
  EXPECT_EQ(apply_token_bitmask(logits, mask), 2);
  for (size_t t = 0; t < logits.size(); ++t) {
    EXPECT_EQ(logits[t] == 1.0f, t == 5 || t == 63) << t;
  }
}

TEST(TokenMask, AllOnesLeavesTheRowUntouchedAndTokensPastTheMaskAreDisallowed) {
  const std::vector<float> original = random_logits(100, 3);
  std::vector<float> logits = original;
  TokenBitmask all(1, 100);  // starts all allowed
  EXPECT_EQ(apply_token_bitmask(logits, all.row(0)), 100);
  EXPECT_EQ(logits, original);

  const std::vector<uint32_t> narrow(2, ~0u);  // covers 64 of the 100 tokens
  EXPECT_EQ(apply_token_bitmask(logits, narrow), 64);
  for (size_t t = 64; t < logits.size(); ++t) EXPECT_TRUE(std::isinf(logits[t])) << t;
  EXPECT_EQ(logits[63], original[63]);

  std::vector<float> short_row(40, 2.0f);
  const std::vector<uint32_t> wide = {~0u, 0xFFu, 0u, ~0u};  // bits past 40 are ignored
  EXPECT_EQ(apply_token_bitmask(short_row, wide), 40);
  EXPECT_EQ(short_row, std::vector<float>(40, 2.0f));
}

TEST(TokenMask, GreedyAfterTheMaskPicksTheBestAllowedToken) {
  std::vector<float> logits = {0.1f, 9.0f, 0.5f, 8.0f, 0.2f, 7.5f};
  std::vector<uint32_t> mask = {(1u << 0) | (1u << 2) | (1u << 5)};
  apply_token_bitmask(logits, mask);
  Sampler sampler;
  SamplingSlot slot;
  slot.params.temperature = 0.0f;
  EXPECT_EQ(sampler.sample(logits, slot, {}).token_id, 5);
  slot.params.temperature = 1.0f;
  for (int i = 0; i < 200; ++i) {
    slot.num_generated = i;
    const int32_t t = sampler.sample(logits, slot, {}).token_id;
    EXPECT_TRUE(t == 0 || t == 2 || t == 5) << t;
  }
}

// The sampler applies the slot's bitmask row itself (StepBatch::bitmask_of), before everything
// else, on the greedy path too; logprobs stay those of the raw row.
TEST(TokenMask, TheSamplerAppliesTheRowItselfGreedyAndSampled) {
  std::vector<float> logits(100);
  for (size_t t = 0; t < logits.size(); ++t) logits[t] = 0.05f * static_cast<float>(t);  // 99 best
  std::vector<uint32_t> row(model::grammar::bitmask_num_words(logits.size()), 0u);
  row[0] |= 1u << 3;
  row[1] |= 1u << (40 - 32);
  Sampler sampler;
  SamplingSlot slot;
  slot.params.temperature = 0.0f;
  slot.params.logprobs = true;
  const SampledToken greedy = sampler.sample(logits, slot, {}, row);
  EXPECT_EQ(greedy.token_id, 40);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v - logits[99]));
  EXPECT_NEAR(greedy.logprob, logits[40] - logits[99] - std::log(sum), 1e-4);  // raw, unmasked
  EXPECT_EQ(sampler.sample(logits, slot, {}).token_id, 99);  // no row: unconstrained
  // A bias cannot revive a masked token.
  slot.params.logit_bias = {{99, 50.0f}};
  EXPECT_EQ(sampler.sample(logits, slot, {}, row).token_id, 40);
  slot.params.logit_bias.clear();
  slot.params.temperature = 1.0f;
  slot.params.top_k = 10;
  for (int i = 0; i < 100; ++i) {
    slot.params.seed = static_cast<uint64_t>(i);
    const int32_t t = sampler.sample(logits, slot, {}, row).token_id;
    EXPECT_TRUE(t == 3 || t == 40) << t;
  }
}

}  // namespace
}  // namespace troupe::gpu::cpu
