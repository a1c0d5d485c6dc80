// Sampler: greedy, seeded reproducibility, top-k/top-p/min-p filters, penalties, logprobs,
// logit_bias and the min_tokens mask.
#include "gpu/cpu/sampler.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

namespace troupe::gpu::cpu {
namespace {

SamplingSlot slot_with(float temperature, uint64_t seed = 1, int32_t generated = 0) {
  SamplingSlot s;
  s.params.temperature = temperature;
  s.params.seed = seed;
  s.num_generated = generated;
  return s;
}

std::vector<float> logits_for(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::set<int32_t> drawn(const std::vector<float>& logits, SamplingSlot slot, int draws = 3000) {
  Sampler s;
  std::set<int32_t> seen;
  for (int i = 0; i < draws; ++i) {
    slot.num_generated = i;
    seen.insert(s.sample(logits, slot, {}).token_id);
  }
  return seen;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  Sampler s;
  const std::vector<float> l = {0.5f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(s.sample(l, slot_with(0.0f), {}).token_id, 1);
  EXPECT_EQ(s.sample(l, slot_with(-1.0f), {}).token_id, 1);
}

// Greedy over a large vocabulary picks what the plain first-maximum loop picks: ties, signed
// zeros, -inf, NaN, the maximum in the vector body or the tail.
TEST(Sampler, GreedyMatchesFirstMaximumLoop) {
  const auto first_max = [](const std::vector<float>& v) {
    int32_t best = 0;
    for (int32_t i = 1; i < static_cast<int32_t>(v.size()); ++i) {
      if (v[i] > v[best]) best = i;
    }
    return best;
  };
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-5.0f, 5.0f);
  Sampler s;
  for (int trial = 0; trial < 60; ++trial) {
    const int32_t n = trial % 3 == 0 ? 49152 : 1 + static_cast<int32_t>(rng() % 300);
    std::vector<float> v(n);
    for (float& x : v) x = std::round(u(rng) * 4.0f) / 4.0f;  // many ties
    if (trial % 5 == 1) v[rng() % n] = 10.0f, v[rng() % n] = 10.0f;
    if (trial % 7 == 2) std::fill(v.begin(), v.end(), 0.0f), v[rng() % n] = -0.0f;
    if (trial % 11 == 3) std::fill(v.begin(), v.end(), -INFINITY);
    if (trial % 13 == 4) v[rng() % n] = NAN;
    if (trial % 4 == 0) v[n - 1] = 20.0f;
    EXPECT_EQ(s.sample(v, slot_with(0.0f), {}).token_id, first_max(v)) << "trial " << trial;
  }
}

TEST(Sampler, SameSeedAndPositionSameToken) {
  const auto l = logits_for({0.1, 0.2, 0.3, 0.4});
  Sampler a, b;
  std::vector<int32_t> x, y;
  for (int i = 0; i < 50; ++i) {
    x.push_back(a.sample(l, slot_with(1.0f, 42, i), {}).token_id);
    y.push_back(b.sample(l, slot_with(1.0f, 42, i), {}).token_id);
  }
  EXPECT_EQ(x, y);
  std::vector<int32_t> z;
  for (int i = 0; i < 50; ++i) z.push_back(a.sample(l, slot_with(1.0f, 43, i), {}).token_id);
  EXPECT_NE(x, z);
  EXPECT_NE(sampling_uniform(1, 0), sampling_uniform(1, 1));
}

TEST(Sampler, DrawFollowsTheDistribution) {
  const auto l = logits_for({0.25, 0.75});
  Sampler s;
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += s.sample(l, slot_with(1.0f, 7, i), {}).token_id;
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.75, 0.015);
}

TEST(Sampler, TopKTopPMinPKeepTheRightSets) {
  const auto l = logits_for({0.05, 0.5, 0.15, 0.3});  // ranks: 1, 3, 2, 0
  auto slot = slot_with(1.0f);
  slot.params.top_k = 1;
  EXPECT_EQ(drawn(l, slot), (std::set<int32_t>{1}));
  slot.params.top_k = 2;
  EXPECT_EQ(drawn(l, slot), (std::set<int32_t>{1, 3}));
  slot.params.top_k = 0;
  slot.params.top_p = 0.7f;
  EXPECT_EQ(drawn(l, slot), (std::set<int32_t>{1, 3}));
  slot.params.top_p = 0.85f;
  EXPECT_EQ(drawn(l, slot), (std::set<int32_t>{1, 2, 3}));
  slot.params.top_p = 1.0f;
  slot.params.min_p = 0.5f;  // keeps p >= 0.25
  EXPECT_EQ(drawn(l, slot), (std::set<int32_t>{1, 3}));
  slot.params.min_p = 0.0f;
  EXPECT_EQ(drawn(l, slot), (std::set<int32_t>{0, 1, 2, 3}));
}

TEST(Sampler, TopPOverALargeVocabulary) {
  std::vector<float> l(50000, 0.0f);
  l[123] = 20.0f;
  l[456] = 19.0f;
  auto slot = slot_with(1.0f);
  slot.params.top_p = 0.9f;  // token 123 holds ~0.73 of the mass, 456 ~0.27
  EXPECT_EQ(drawn(l, slot, 500), (std::set<int32_t>{123, 456}));
}

TEST(Sampler, PenaltiesOverTheRecentWindow) {
  const std::vector<float> l = {2.0f, 1.5f, -1.0f};
  Sampler s;
  auto slot = slot_with(0.01f);  // near-greedy, but penalties apply
  const std::vector<int32_t> once = {0}, twice = {0, 0}, old = {0, 2};
  EXPECT_EQ(s.sample(l, slot, once).token_id, 0);
  slot.params.repetition_penalty = 2.0f;  // 2.0 -> 1.0
  EXPECT_EQ(s.sample(l, slot, once).token_id, 1);
  slot.params.penalty_last_n = 1;  // window holds only the last token (2)
  EXPECT_EQ(s.sample(l, slot, old).token_id, 0);
  slot.params = slot_with(0.01f).params;
  slot.params.presence_penalty = 1.0f;
  EXPECT_EQ(s.sample(l, slot, once).token_id, 1);
  slot.params.presence_penalty = 0.0f;
  slot.params.frequency_penalty = 0.3f;
  EXPECT_EQ(s.sample(l, slot, once).token_id, 0);   // 2.0 - 0.3
  EXPECT_EQ(s.sample(l, slot, twice).token_id, 1);  // 2.0 - 0.6
  // Repetition penalty multiplies negative logits.
  const std::vector<float> neg = {-1.0f, -1.5f};
  slot.params = slot_with(0.01f).params;
  slot.params.repetition_penalty = 2.0f;
  EXPECT_EQ(s.sample(neg, slot, once).token_id, 1);  // -1 -> -2
}

TEST(Sampler, LogprobsAreRawLogSoftmaxWithSortedAlternatives) {
  const auto l = logits_for({0.1, 0.6, 0.3});
  auto slot = slot_with(0.0f);
  slot.params.logprobs = true;
  slot.params.top_logprobs = 2;
  Sampler s;
  const SampledToken t = s.sample(l, slot, {});
  EXPECT_EQ(t.token_id, 1);
  EXPECT_NEAR(t.logprob, std::log(0.6), 1e-5);
  ASSERT_EQ(t.top_logprobs.size(), 2u);
  EXPECT_EQ(t.top_logprobs[0].token_id, 1);
  EXPECT_EQ(t.top_logprobs[1].token_id, 2);
  EXPECT_NEAR(t.top_logprobs[1].logprob, std::log(0.3), 1e-5);
}

// -100 bans the favourite (greedy and sampled), +100 forces an unlikely token.
TEST(Sampler, LogitBiasBansAndForcesTokens) {
  const auto l = logits_for({0.05, 0.8, 0.1, 0.05});
  auto greedy = slot_with(0.0f);
  greedy.params.logit_bias = {{1, -100.0f}};
  Sampler s;
  EXPECT_EQ(s.sample(l, greedy, {}).token_id, 2);
  auto hot = slot_with(2.0f);  // the highest temperature the API allows
  hot.params.logit_bias = {{1, -100.0f}};
  EXPECT_EQ(drawn(l, hot).count(1), 0u);
  hot.params.logit_bias = {{3, 100.0f}};
  EXPECT_EQ(drawn(l, hot), (std::set<int32_t>{3}));
  greedy.params.logit_bias = {{0, 100.0f}};
  EXPECT_EQ(s.sample(l, greedy, {}).token_id, 0);
}

// A small bias moves greedy argmax exactly by its amount; ids outside the row are ignored.
TEST(Sampler, GreedyAddsTheBiasBeforeArgmax) {
  const std::vector<float> l = {1.0f, 2.0f, 1.5f};
  auto slot = slot_with(0.0f);
  slot.params.logit_bias = {{0, 0.9f}, {7, 100.0f}};
  Sampler s;
  EXPECT_EQ(s.sample(l, slot, {}).token_id, 1);  // 1.9 < 2
  slot.params.logit_bias = {{0, 1.1f}, {7, 100.0f}};
  EXPECT_EQ(s.sample(l, slot, {}).token_id, 0);  // 2.1 > 2
}

// Logprobs stay those of the raw row (vLLM v1's raw_logprobs), whatever the bias did.
TEST(Sampler, LogprobsIgnoreTheBias) {
  const auto l = logits_for({0.1, 0.6, 0.3});
  auto slot = slot_with(0.0f);
  slot.params.logprobs = true;
  slot.params.top_logprobs = 1;
  slot.params.logit_bias = {{1, -100.0f}};
  Sampler s;
  const SampledToken t = s.sample(l, slot, {});
  EXPECT_EQ(t.token_id, 2);
  EXPECT_NEAR(t.logprob, std::log(0.3), 1e-5);
  ASSERT_EQ(t.top_logprobs.size(), 1u);
  EXPECT_EQ(t.top_logprobs[0].token_id, 1);
}

// The end ids are masked while num_generated < min_tokens, then allowed again.
TEST(Sampler, MinTokensMasksEndTokensUntilReached) {
  const auto l = logits_for({0.1, 0.2, 0.6, 0.1});  // 2 plays EOS, 3 a stop_token_id
  Sampler s;
  for (const float temperature : {0.0f, 1.0f}) {
    auto slot = slot_with(temperature);
    slot.params.min_tokens = 3;
    slot.end_token_ids = {2, 3};
    for (int32_t generated = 0; generated < 3; ++generated) {
      slot.num_generated = generated;
      const int32_t token = s.sample(l, slot, {}).token_id;
      EXPECT_NE(token, 2) << "generated " << generated;
      EXPECT_NE(token, 3) << "generated " << generated;
    }
    auto many = slot;
    many.num_generated = 0;
    if (temperature > 0.0f) {
      many.params.min_tokens = 1 << 20;  // drawn() counts num_generated up to 3000
      EXPECT_EQ(drawn(l, many), (std::set<int32_t>{0, 1}));
    }
    slot.num_generated = 3;
    if (temperature == 0.0f) EXPECT_EQ(s.sample(l, slot, {}).token_id, 2);
    many.params.min_tokens = 0;
    if (temperature > 0.0f) EXPECT_TRUE(drawn(l, many).count(2));
  }
}

// The mask wins over a +100 bias on an end id.
TEST(Sampler, MinTokensMaskBeatsAPositiveBias) {
  const auto l = logits_for({0.5, 0.5});
  auto slot = slot_with(0.0f);
  slot.params.min_tokens = 1;
  slot.params.logit_bias = {{1, 100.0f}};
  slot.end_token_ids = {1};
  Sampler s;
  EXPECT_EQ(s.sample(l, slot, {}).token_id, 0);
  slot.num_generated = 1;
  EXPECT_EQ(s.sample(l, slot, {}).token_id, 1);
}

}  // namespace
}  // namespace troupe::gpu::cpu
