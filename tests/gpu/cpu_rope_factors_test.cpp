// RoPE frequency factors (rope_freqs.weight, Llama 3.1+): the CPU table against a plain double
// reference of the formula, the no-factor path's bits kept, and the CPU backend end to end on
// tiny dummy models (factors of 1 change nothing, factors of 2 equal linear scaling by 2, real
// llama3 factors change the logits).
//
// Tolerance of the formula test: 5e-6 * (1 + pos) absolute per element (inputs ~N(0, 1)). The
// table advances theta by repeated float multiplication, as ggml does, so its angle carries
// ~1e-6 relative error per step and float rounding of angles up to pos; the reference is double.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/cpu/rope.hpp"
#include "model/dummy_weights.hpp"
#include "tests/gpu/cpu_step_harness.hpp"
#include "tests/gpu/cpu_test_util.hpp"
#include "tests/gpu/rope_factors_util.hpp"

namespace troupe::gpu::cpu {
namespace {

std::vector<float> random_factors(int32_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(1.0f, 32.0f);
  std::vector<float> f(static_cast<size_t>(n));
  for (float& x : f) x = dist(rng);
  return f;
}

// theta_i = pos * freq_scale * base^(-2i / n_rot) / factor_i, in double, written out
// independently of rope_reference; NORM pairs (2i, 2i+1) or NEOX pairs (i, i + n_rot/2).
void reference_rope(float* x, int32_t heads, int32_t head_dim, int32_t n_rot, int32_t pos,
                    double base, double freq_scale, const float* factors, bool neox) {
  for (int32_t h = 0; h < heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int32_t i = 0; i < n_rot / 2; ++i) {
      const double theta = pos * freq_scale * std::pow(base, -2.0 * i / n_rot) / factors[i];
      const int32_t a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
      const double x0 = v[a], x1 = v[b];
      v[a] = static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta));
      v[b] = static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta));
    }
  }
}

struct Shape {
  int32_t heads, head_dim, n_rot;
  float base, freq_scale;
};
const Shape kShapes[] = {{4, 64, 64, 500000.0f, 1.0f},
                         {2, 128, 128, 500000.0f, 1.0f},
                         {3, 48, 32, 10000.0f, 0.5f},
                         {2, 24, 18, 10000.0f, 1.0f}};
const int32_t kPositions[] = {0, 1, 17, 300, 4095};

TEST(RopeFactors, MatchScalarFormulaBothModesEveryIsa) {
  for (const Shape& s : kShapes) {
    std::vector<std::vector<float>> factor_sets = {random_factors(s.n_rot / 2, s.n_rot)};
    factor_sets.push_back(
        model::llama3_rope_freq_factors(s.n_rot, s.base, {32.0f, 1.0f, 4.0f, 8192}));
    for (const auto& factors : factor_sets) {
      const RopeParams p{s.n_rot, s.base, s.freq_scale, factors.data()};
      for (int32_t pos : kPositions) {
        std::vector<float> c(s.n_rot / 2), sn(s.n_rot / 2);
        rope_table(pos, p, c.data(), sn.data());
        const auto x =
            testing::random_floats(static_cast<size_t>(s.heads) * s.head_dim, pos + s.n_rot);
        for (bool neox : {false, true}) {
          auto want = x;
          reference_rope(want.data(), s.heads, s.head_dim, s.n_rot, pos, s.base, s.freq_scale,
                         factors.data(), neox);
          for (IsaLevel isa : runnable_isas()) {
            auto got = x;
            if (neox) {
              rope_apply_neox(got.data(), s.heads, s.head_dim, s.n_rot, c.data(), sn.data(), isa);
            } else {
              rope_apply(got.data(), s.heads, s.head_dim, s.n_rot, c.data(), sn.data(), isa);
            }
            for (size_t j = 0; j < got.size(); ++j) {
              ASSERT_NEAR(got[j], want[j], 5e-6 * (1 + pos))
                  << to_string(isa) << " n_rot " << s.n_rot << " pos " << pos << " neox " << neox
                  << " j " << j;
            }
          }
        }
      }
    }
  }
}

TEST(RopeFactors, RopeReferenceAppliesFactorsToo) {
  const std::vector<float> factors = random_factors(16, 4);
  const RopeParams p{32, 100000.0f, 1.0f, factors.data()};
  auto a = testing::random_floats(3 * 48, 5);
  auto b = a;
  rope_reference(a.data(), 3, 48, 300, p);
  reference_rope(b.data(), 3, 48, 32, 300, 100000.0, 1.0, factors.data(), false);
  for (size_t j = 0; j < a.size(); ++j) ASSERT_NEAR(a[j], b[j], 1e-6) << j;
}

// x / 1.0f == x exactly, so the factor path with all-ones gives the plain path's bits; and the
// plain path's table is the one the llama.cpp bit-parity tests already pin down.
TEST(RopeFactors, AllOnesGiveTheSameBitsAsNone) {
  for (const Shape& s : kShapes) {
    const std::vector<float> ones(s.n_rot / 2, 1.0f);
    for (int32_t pos : {0, 1, 2, 17, 300, 4095, 131071}) {
      std::vector<float> c0(s.n_rot / 2), s0(s.n_rot / 2), c1(s.n_rot / 2), s1(s.n_rot / 2);
      rope_table(pos, {s.n_rot, s.base, s.freq_scale}, c0.data(), s0.data());
      rope_table(pos, {s.n_rot, s.base, s.freq_scale, ones.data()}, c1.data(), s1.data());
      ASSERT_EQ(0, std::memcmp(c0.data(), c1.data(), 4 * c0.size())) << "pos " << pos;
      ASSERT_EQ(0, std::memcmp(s0.data(), s1.data(), 4 * s0.size())) << "pos " << pos;
    }
  }
}

// Dividing by 2 and multiplying by 0.5 are both exact in float: factors of 2 must give exactly
// linear scaling by 2 (freq_scale 0.5).
TEST(RopeFactors, FactorsOfTwoEqualLinearScalingByTwo) {
  for (const Shape& s : kShapes) {
    const std::vector<float> twos(s.n_rot / 2, 2.0f);
    for (int32_t pos : kPositions) {
      std::vector<float> c0(s.n_rot / 2), s0(s.n_rot / 2), c1(s.n_rot / 2), s1(s.n_rot / 2);
      rope_table(pos, {s.n_rot, s.base, 0.5f}, c0.data(), s0.data());
      rope_table(pos, {s.n_rot, s.base, 1.0f, twos.data()}, c1.data(), s1.data());
      ASSERT_EQ(0, std::memcmp(c0.data(), c1.data(), 4 * c0.size())) << "pos " << pos;
      ASSERT_EQ(0, std::memcmp(s0.data(), s1.data(), 4 * s0.size())) << "pos " << pos;
    }
  }
}

// ----- the CPU backend end to end on a tiny dummy model -----

// The shared tiny model at Llama 3's RoPE base.
model::LlamaConfig tiny_llama3_config() {
  model::LlamaConfig c = testing::tiny_config();
  c.rope_freq_base = 500000.0f;
  return c;
}

using gpu::testing::with_rope_factors;

// Logits after a 40-token prompt (chunks of 16) and after 3 teacher-forced decode tokens.
std::vector<float> run_logits(model::LlamaWeights w) {
  CpuBackendConfig cfg;
  cfg.num_blocks = 64;
  cfg.num_threads = 2;
  CpuBackend backend(std::move(w), cfg);
  testing::StepHarness h(64, 16);
  std::mt19937 rng(11);
  std::vector<int32_t> prompt(43);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 512);
  h.add(1, std::vector<int32_t>(prompt.begin(), prompt.begin() + 40));
  std::vector<float> all;
  for (int done = 0; done < 40; done += 16) {
    const std::vector<float> l = backend.compute_logits(h.build({{1, std::min(16, 40 - done)}}));
    if (done + 16 >= 40) all.insert(all.end(), l.begin(), l.end());
  }
  for (int i = 40; i < 43; ++i) {
    h.seq(1).tokens.push_back(prompt[i]);
    const std::vector<float> l = backend.compute_logits(h.build({{1, 1}}));
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

TEST(RopeFactorsForward, OnesEqualNoFactorsAndTwosEqualLinearScaling) {
  const model::LlamaConfig c = tiny_llama3_config();
  const auto base = model::make_dummy_weights(c, model::TensorType::kQ4_1, 7);
  ASSERT_TRUE(base.rope_freq_factors().empty());
  const std::vector<float> plain = run_logits(base);
  const std::vector<float> ones =
      run_logits(with_rope_factors(base, c, std::vector<float>(16, 1.0f)));
  ASSERT_EQ(plain.size(), ones.size());
  EXPECT_EQ(0, std::memcmp(plain.data(), ones.data(), 4 * plain.size()));

  model::LlamaConfig linear = c;
  linear.rope_freq_scale = 0.5f;
  const std::vector<float> scaled = run_logits(with_rope_factors(base, linear, {}));  // none
  const std::vector<float> twos =
      run_logits(with_rope_factors(base, c, std::vector<float>(16, 2.0f)));
  EXPECT_EQ(0, std::memcmp(scaled.data(), twos.data(), 4 * scaled.size()));
  EXPECT_NE(0, std::memcmp(plain.data(), twos.data(), 4 * plain.size()));
}

TEST(RopeFactorsForward, Llama3FactorsFromDummyWeightsReachTheForwardPass) {
  model::LlamaConfig c = tiny_llama3_config();
  const auto plain_w = model::make_dummy_weights(c, model::TensorType::kQ4_0, 9);
  c.rope_llama3 = model::Llama3RopeScaling{32.0f, 1.0f, 4.0f, 8192};
  const auto scaled_w = model::make_dummy_weights(c, model::TensorType::kQ4_0, 9);
  ASSERT_EQ(scaled_w.rope_freq_factors().size(), 16u);
  // Same seed, same matrices: only the RoPE factors differ.
  ASSERT_EQ(0, std::memcmp(plain_w.layers()[1].wq.data, scaled_w.layers()[1].wq.data,
                           plain_w.layers()[1].wq.num_bytes));
  const std::vector<float> plain = run_logits(plain_w);
  const std::vector<float> scaled = run_logits(scaled_w);
  EXPECT_NE(0, std::memcmp(plain.data(), scaled.data(), 4 * plain.size()));
  for (float v : scaled) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace troupe::gpu::cpu
