// K-quant weights (Q4_K, Q5_K, Q6_K) in the batched matmul: every ISA path and thread split
// bit-exact against the scalar reference on random blocks (odd output counts, several widths),
// the reference within a stated bound of the float64 product of the dequantized weights, batch
// invariance, and a SmolLM2-135M-shaped Q4_K / Q4_K_M-like dummy model running forward steps.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu/cpu/cpu_backend.hpp"
#include "model/dummy_weights.hpp"
#include "tests/gpu/cpu_matmul_test_util.hpp"
#include "tests/gpu/cpu_step_harness.hpp"

namespace troupe::gpu::cpu {
namespace {

using model::TensorType;
using testing::MatmulShape;
using testing::MatmulTest;

const MatmulShape kShapes[] = {{1, 256, 1},    {37, 256, 3},  {17, 512, 9}, {5, 1536, 2},
                               {100, 768, 17}, {33, 2048, 4}, {16, 256, 64}};
const TensorType kTypes[] = {TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K};

// Bound against the exact product: float32 rounding of the chains (2e-6 of sum |w x|) plus the
// int8 activation rounding, at most 0.6 of a step (half a step, and the fp16 rounding of the
// step itself: 127 * 2^-11 < 0.1) per element, times |w|. The tests themselves:
// tests/gpu/cpu_matmul_test_util.hpp.
INSTANTIATE_TEST_SUITE_P(KQuant, MatmulTest,
                         ::testing::ValuesIn(testing::matmul_cases(kTypes, kShapes, 0.6)),
                         testing::matmul_case_name);

// A SmolLM2-135M-shaped dummy (576-wide rows fall back to Q5_0/Q8_0; ffn_down and the Q4_K_M
// mix's 1536-wide rows are K-quants) runs a prefill and a decode step with finite logits.
void run_two_steps(const model::LlamaWeights& weights) {
  CpuBackendConfig cfg;
  cfg.num_blocks = 16;
  cfg.num_threads = 2;
  CpuBackend backend(weights, cfg);
  testing::StepHarness h(16, 16);
  h.add(1, {1, 2, 3, 4, 5, 6, 7, 8});
  const int V = backend.model_config().n_vocab;
  const auto prefill = backend.compute_logits(h.build({{1, 8}}));
  ASSERT_EQ(prefill.size(), static_cast<size_t>(V));
  for (float v : prefill) ASSERT_TRUE(std::isfinite(v));
  StepResult r;
  r.tokens.push_back({1, 42, 0.0f, {}});
  h.accept(r);
  const auto decode = backend.compute_logits(h.build({{1, 1}}));
  for (float v : decode) ASSERT_TRUE(std::isfinite(v));
}

TEST(KQuantModel, SmolLm2ShapedQ4_KRunsForwardSteps) {
  model::DummyWeightsSpec spec;
  spec.type = TensorType::kQ4_K;
  const auto weights = model::make_dummy_weights(spec);
  EXPECT_EQ(weights.layers()[0].w_down.type, TensorType::kQ4_K);
  EXPECT_EQ(weights.layers()[0].wq.type, TensorType::kQ5_0);  // 576-wide rows: fallback
  run_two_steps(weights);
}

TEST(KQuantModel, SmolLm2ShapedQ4_K_MMixRunsForwardSteps) {
  model::DummyWeightsSpec spec;
  spec.mix = model::DummyMix::kQ4_K_M;
  const auto weights = model::make_dummy_weights(spec);
  EXPECT_EQ(weights.layers()[0].w_down.type, TensorType::kQ6_K);   // use_more_bits(0)
  EXPECT_EQ(weights.layers()[4].w_down.type, TensorType::kQ4_K);   // not use_more_bits(4)
  EXPECT_EQ(weights.token_embd().type, TensorType::kQ8_0);      // tied output: Q6_K -> fallback
  run_two_steps(weights);
}

}  // namespace
}  // namespace troupe::gpu::cpu
