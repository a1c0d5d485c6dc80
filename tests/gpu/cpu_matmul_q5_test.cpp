// Q5_0 / Q5_1 weights in the batched matmul: every ISA path and thread split bit-exact against
// the scalar reference on random blocks (odd output and row counts), the reference within a
// stated bound of the float64 product of the dequantized weights, batch invariance, and the
// SmolLM2-135M-shaped Q4_K_M-like dummy (Q5_0 fallbacks, as the real file has) running steps.
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/cpu/matmul.hpp"
#include "model/dummy_weights.hpp"
#include "tests/gpu/cpu_matmul_test_util.hpp"
#include "tests/gpu/cpu_step_harness.hpp"

namespace troupe::gpu::cpu {
namespace {

using model::TensorType;
using testing::MatmulShape;
using testing::MatmulTest;

const MatmulShape kShapes[] = {{1, 32, 1},    {37, 64, 3},  {17, 576, 9}, {5, 1536, 2},
                               {100, 96, 17}, {33, 576, 4}, {16, 32, 64}, {19, 160, 7}};
const TensorType kTypes[] = {TensorType::kQ5_0, TensorType::kQ5_1};

// Bound against the exact product: float32 rounding of the chains (2e-6 of sum |w x|) plus the
// int8 activation rounding, at most 0.6 of a step per element, times |w| (as the K-quant test).
// The tests themselves: tests/gpu/cpu_matmul_test_util.hpp.
INSTANTIATE_TEST_SUITE_P(Q5, MatmulTest,
                         ::testing::ValuesIn(testing::matmul_cases(kTypes, kShapes, 0.6)),
                         testing::matmul_case_name);

// One output whose weights are a hand-built Q5_0 block (value i = i - 16: the fifth bit set for
// i >= 16 only) against one-hot activations: y = d * (i - 16) exactly, on every path.
TEST(Q5Matmul, HandBuiltBlockOneHotInputs) {
  uint8_t blk[22] = {};
  const uint16_t d = model::fp32_to_fp16(0.25f);
  std::memcpy(blk, &d, 2);
  blk[2 + 2] = 0xFF;  // qh bits 16..31
  blk[2 + 3] = 0xFF;
  for (int j = 0; j < 16; ++j) blk[6 + j] = static_cast<uint8_t>(j | (j << 4));  // value i: code i
  const PackedMatrix packed = PackedMatrix::pack(TensorType::kQ5_0, blk, 1, 32);
  for (int i = 0; i < 32; ++i) {
    std::vector<float> x(32, 0.0f);
    x[i] = 1.0f;  // quantizes to 127 with dx = fp16(1 / 127)
    QuantizedRows q;
    quantize_rows(x.data(), 32, 1, 32, q);
    const float want = 0.25f * q.scale[0] * static_cast<float>((i - 16) * 127);
    for (IsaLevel isa : runnable_isas()) {
      float y = 0;
      matmul(packed, {x.data(), 32, 1, &q}, &y, 1, nullptr, isa);
      ASSERT_EQ(y, want) << "input " << i << " isa " << to_string(isa);
    }
  }
}

TEST(Q5Model, SmolLm2ShapedQ4_K_MMixHasLlamaCppFallbacksAndRuns) {
  model::DummyWeightsSpec spec;
  spec.mix = model::DummyMix::kQ4_K_M;
  const auto weights = model::make_dummy_weights(spec);
  EXPECT_EQ(weights.layers()[4].wq.type, TensorType::kQ5_0);  // Q4_K on 576-wide rows
  EXPECT_EQ(weights.layers()[4].w_gate.type, TensorType::kQ5_0);
  EXPECT_EQ(weights.layers()[4].w_down.type, TensorType::kQ4_K);  // 1536-wide rows
  EXPECT_EQ(weights.layers()[0].wv.type, TensorType::kQ8_0);      // Q6_K on 576-wide rows
  EXPECT_EQ(weights.token_embd().type, TensorType::kQ8_0);
  CpuBackendConfig cfg;
  cfg.num_blocks = 16;
  cfg.num_threads = 2;
  CpuBackend backend(weights, cfg);
  testing::StepHarness h(16, 16);
  h.add(1, {1, 2, 3, 4, 5, 6, 7, 8});
  const auto prefill = backend.compute_logits(h.build({{1, 8}}));
  ASSERT_EQ(prefill.size(), static_cast<size_t>(backend.model_config().n_vocab));
  for (float v : prefill) ASSERT_TRUE(std::isfinite(v));
}

TEST(Q5Model, UniformQ5_KFallsBackToQ5_1) {
  model::DummyWeightsSpec spec;
  spec.type = TensorType::kQ5_K;
  const auto weights = model::make_dummy_weights(spec);
  EXPECT_EQ(weights.layers()[0].wq.type, TensorType::kQ5_1);
  EXPECT_EQ(weights.layers()[0].w_down.type, TensorType::kQ5_K);
}

}  // namespace
}  // namespace troupe::gpu::cpu
