// The llama-3.2-1b dummy shape at full size: its weights carry Meta's llama3 RoPE factors as
// rope_freqs.weight (what llama.cpp's converter writes), and the CPU backend runs a prefill
// chunk and a decode step on them (about a gigabyte of weights generated and packed: a few
// seconds).
#include <cmath>

#include <gtest/gtest.h>

#include "gpu/cpu/cpu_backend.hpp"
#include "model/dummy_weights.hpp"
#include "tests/gpu/cpu_step_harness.hpp"

namespace troupe::gpu::cpu {
namespace {

TEST(DummyLlama32, CarriesRopeFactorsAndRunsForwardSteps) {
  const auto w = model::make_dummy_weights({"llama-3.2-1b", model::TensorType::kQ4_0, 1});
  const model::LlamaConfig& c = w.config();
  ASSERT_TRUE(c.rope_llama3);
  const auto factors = w.rope_freq_factors();
  ASSERT_EQ(factors.size(), 32u);  // n_rot 64 / 2
  const auto want = model::llama3_rope_freq_factors(64, 500000.0f, {32.0f, 1.0f, 4.0f, 8192});
  for (size_t i = 0; i < factors.size(); ++i) EXPECT_EQ(factors[i], want[i]) << i;
  EXPECT_EQ(factors.front(), 1.0f);
  EXPECT_EQ(factors.back(), 32.0f);

  CpuBackendConfig cfg;
  cfg.num_blocks = 8;
  cfg.num_threads = 2;
  CpuBackend backend(w, cfg);
  testing::StepHarness h(8, 16);
  h.add(1, {128000, 791, 6864, 315, 9822, 374, 12366, 13, 578, 6864, 315, 9635, 374});
  const std::vector<float> prefill = backend.compute_logits(h.build({{1, 13}}));
  ASSERT_EQ(prefill.size(), static_cast<size_t>(c.n_vocab));
  h.seq(1).tokens.push_back(20023);
  const std::vector<float> decode = backend.compute_logits(h.build({{1, 1}}));
  ASSERT_EQ(decode.size(), static_cast<size_t>(c.n_vocab));
  for (float v : prefill) ASSERT_TRUE(std::isfinite(v));
  for (float v : decode) ASSERT_TRUE(std::isfinite(v));
}

TEST(DummyLlama32, OnlyTheLlama32ShapesCarryFactors) {
  for (const std::string& name : model::LlamaConfig::named_shapes()) {
    const auto c = model::LlamaConfig::named_shape(name);
    ASSERT_TRUE(c) << name;
    EXPECT_EQ(c->rope_llama3.has_value(), name.rfind("llama-3.2", 0) == 0) << name;
  }
}

}  // namespace
}  // namespace troupe::gpu::cpu
