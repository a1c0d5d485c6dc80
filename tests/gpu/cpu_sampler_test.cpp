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

// ---- Speculative decoding: verifying drafts (issue 21) ----------------------------------------

namespace troupe::gpu::cpu {
namespace {

// Rows of logits, one per verify position, each a distribution over a small vocabulary.
std::vector<float> rows_of(const std::vector<std::vector<double>>& probs) {
  std::vector<float> all;
  for (const auto& p : probs) {
    const auto row = logits_for(p);
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

std::vector<int32_t> verify(Sampler& s, const std::vector<float>& logits, int64_t vocab,
                            const SamplingSlot& slot, const std::vector<int32_t>& drafts,
                            const std::vector<int32_t>& recent = {}) {
  std::vector<SampledToken> out(drafts.size() + 1);
  std::vector<int32_t> window = recent;
  window.insert(window.end(), drafts.begin(), drafts.end());
  const int32_t n = s.sample_verified(logits, vocab, slot, window,
                                      static_cast<int32_t>(recent.size()), {}, drafts, out);
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < n; ++i) ids.push_back(out[static_cast<size_t>(i)].token_id);
  return ids;
}

TEST(SamplerVerify, GreedyKeepsDraftsWhileTheyAreTheArgmax) {
  Sampler s;
  // argmax per row: 2, 1, 3, 0
  const auto logits = rows_of({{.1, .2, .6, .1}, {.1, .7, .1, .1}, {.1, .1, .2, .6}, {.9, .05, .03, .02}});
  const SamplingSlot greedy = slot_with(0.0f);
  EXPECT_EQ(verify(s, logits, 4, greedy, {2, 1, 3}), (std::vector<int32_t>{2, 1, 3, 0}));  // all + bonus
  EXPECT_EQ(verify(s, logits, 4, greedy, {2, 0, 3}), (std::vector<int32_t>{2, 1}));  // 2nd rejected
  EXPECT_EQ(verify(s, logits, 4, greedy, {3, 1, 3}), (std::vector<int32_t>{2}));     // 1st rejected
  // The draft after a rejection is never looked at, whatever it is.
  EXPECT_EQ(verify(s, logits, 4, greedy, {2, 1, 2}), (std::vector<int32_t>{2, 1, 3}));
}

// Seeded sampling: the tokens kept are exactly those plain decoding draws one at a time (each
// position's draw uses its own token index), whatever the drafts are.
TEST(SamplerVerify, SeededVerifyEmitsWhatPlainSamplingWould) {
  Sampler s;
  const auto logits = rows_of({{.4, .3, .2, .1}, {.25, .25, .25, .25}, {.1, .6, .2, .1}});
  for (uint64_t seed = 0; seed < 400; ++seed) {
    SamplingSlot slot = slot_with(0.9f, seed, 5);
    std::vector<int32_t> plain;
    for (int32_t i = 0; i < 3; ++i) {
      plain.push_back(s.sample(std::span<const float>(logits).subspan(i * 4, 4), slot, {}, {}, i).token_id);
    }
    const std::vector<int32_t> drafts = {static_cast<int32_t>(seed % 4), static_cast<int32_t>(seed / 4 % 4)};
    const std::vector<int32_t> kept = verify(s, logits, 4, slot, drafts);
    ASSERT_FALSE(kept.empty());
    for (size_t i = 0; i < kept.size(); ++i) EXPECT_EQ(kept[i], plain[i]) << "seed " << seed;
    size_t accepted = 0;
    while (accepted < drafts.size() && plain[accepted] == drafts[accepted]) ++accepted;
    EXPECT_EQ(kept.size(), accepted + 1) << "seed " << seed;
  }
}

// The acceptance rule on a 4-token vocabulary, over many seeds: draft x is accepted with
// probability p(x), and a rejection yields y != x with probability p(y) / (1 - p(x)) (the
// standard rule for a one-hot draft). p here is the processed distribution (temperature 0.5
// sharpens the row, top_k 3 drops the last token): exactly what plain sampling samples.
TEST(SamplerVerify, AcceptanceFollowsTheSpeculativeSamplingRule) {
  Sampler s;
  const std::vector<double> raw = {0.1, 0.2, 0.3, 0.4};
  const auto logits = rows_of({raw, raw});
  SamplingSlot slot = slot_with(0.5f);
  slot.params.top_k = 3;
  // p ~ raw^(1/T) over the top 3 ids (1, 2, 3).
  std::vector<double> p = {0, 0.04, 0.09, 0.16};
  const double z = p[1] + p[2] + p[3];
  for (double& v : p) v /= z;
  const int kSeeds = 60000;
  for (int32_t x : {1, 3}) {
    std::vector<int> first(4, 0);
    for (int seed = 0; seed < kSeeds; ++seed) {
      slot.params.seed = static_cast<uint64_t>(seed) * 7919 + 13;
      ++first[static_cast<size_t>(verify(s, logits, 4, slot, {x}).front())];
    }
    EXPECT_EQ(first[0], 0);  // outside top_k: never, drafted or not
    const double accept = static_cast<double>(first[static_cast<size_t>(x)]) / kSeeds;
    const double sigma = std::sqrt(p[static_cast<size_t>(x)] * (1 - p[static_cast<size_t>(x)]) / kSeeds);
    EXPECT_NEAR(accept, p[static_cast<size_t>(x)], 5 * sigma) << "draft " << x;
    const int rejected = kSeeds - first[static_cast<size_t>(x)];
    for (int32_t y = 1; y < 4; ++y) {
      if (y == x) continue;
      const double q = p[static_cast<size_t>(y)] / (1 - p[static_cast<size_t>(x)]);
      const double got = static_cast<double>(first[static_cast<size_t>(y)]) / rejected;
      EXPECT_NEAR(got, q, 5 * std::sqrt(q * (1 - q) / rejected)) << "draft " << x << ", token " << y;
    }
  }
}

// Each position sees the drafts before it as generated: penalties count them, and min_tokens
// masks the end ids only while fewer than min_tokens tokens precede the position.
TEST(SamplerVerify, PositionsSeeEarlierDraftsAsGenerated) {
  Sampler s;
  const auto logits = rows_of({{.05, .8, .1, .05}, {.05, .8, .1, .05}, {.05, .8, .1, .05}});
  SamplingSlot penalized = slot_with(0.0f);
  penalized.params.temperature = 1e-4f;  // sampled path (penalties apply), practically greedy
  penalized.params.repetition_penalty = 100.0f;
  // Row 0 has no 1 in its window: 1 wins. Row 1 sees draft 0 (a 1): penalized, 2 wins.
  EXPECT_EQ(verify(s, logits, 4, penalized, {1, 1}, {3}), (std::vector<int32_t>{1, 2}));

  SamplingSlot min_tokens = slot_with(0.0f, 1, /*generated=*/1);
  min_tokens.params.min_tokens = 3;
  min_tokens.end_token_ids = {1};
  // Tokens 2 and 3 of the output (rows 0, 1) may not end it; token 4 (row 2) may.
  EXPECT_EQ(verify(s, logits, 4, min_tokens, {2, 2}), (std::vector<int32_t>{2, 2, 1}));
}

}  // namespace
}  // namespace troupe::gpu::cpu
