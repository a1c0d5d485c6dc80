// K-quant weights (Q4_K, Q5_K, Q6_K) in the batched matmul: every ISA path and thread split
// bit-exact against the scalar reference on random blocks (odd output counts, several widths),
// the reference within a stated bound of the float64 product of the dequantized weights, batch
// invariance, and a SmolLM2-135M-shaped Q4_K / Q4_K_M-like dummy model running forward steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>

#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/cpu/matmul.hpp"
#include "gpu/cpu/thread_pool.hpp"
#include "model/dummy_weights.hpp"
#include "tests/gpu/cpu_step_harness.hpp"
#include "tests/gpu/cpu_test_util.hpp"

namespace troupe::gpu::cpu {
namespace {

using model::TensorType;

struct Shape {
  int64_t outputs, inputs, rows;
};

const Shape kShapes[] = {{1, 256, 1},  {37, 256, 3}, {17, 512, 9},  {5, 1536, 2},
                         {100, 768, 17}, {33, 2048, 4}, {16, 256, 64}};
const TensorType kTypes[] = {TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K};

class KQuantMatmulTest : public ::testing::TestWithParam<std::tuple<TensorType, int>> {};

// Bound against the exact product: float32 rounding of the chains (2e-6 of sum |w x|) plus the
// int8 activation rounding, at most 0.6 of a step (half a step, and the fp16 rounding of the
// step itself: 127 * 2^-11 < 0.1) per element, times |w|.
TEST_P(KQuantMatmulTest, AllPathsMatchReferenceBitExact) {
  const TensorType type = std::get<0>(GetParam());
  const Shape s = kShapes[std::get<1>(GetParam())];
  const auto w = testing::random_weights(type, s.outputs, s.inputs, 42 + s.outputs);
  const auto x = testing::random_floats(s.rows * s.inputs, 7 + s.rows);
  QuantizedRows q;
  quantize_rows(x.data(), s.inputs, s.rows, s.inputs, q);
  const MatmulInput in{x.data(), s.inputs, s.rows, &q};
  std::vector<float> ref(s.rows * s.outputs);
  matmul_reference(type, w.data(), s.outputs, s.inputs, in, ref.data(), s.outputs);

  std::vector<float> wrow(s.inputs);
  for (int64_t o = 0; o < s.outputs; ++o) {
    dequantize_row(type, w.data() + o * model::row_bytes(type, s.inputs), s.inputs, wrow.data());
    for (int64_t r = 0; r < s.rows; ++r) {
      double exact = 0, bound = 1e-7;
      for (int64_t k = 0; k < s.inputs; ++k) {
        const double wx = static_cast<double>(wrow[k]) * x[r * s.inputs + k];
        exact += wx;
        bound += 2e-6 * std::fabs(wx) + std::fabs(wrow[k]) * 0.6 * q.scale[(r * s.inputs + k) / 32];
      }
      ASSERT_NEAR(ref[r * s.outputs + o], exact, bound) << "row " << r << " output " << o;
    }
  }

  const PackedMatrix packed = PackedMatrix::pack(type, w.data(), s.outputs, s.inputs);
  ASSERT_TRUE(packed.quantized());
  ThreadPool pool(3);
  for (IsaLevel isa : runnable_isas()) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      std::vector<float> y(s.rows * (s.outputs + 3), -1.0f);
      matmul(packed, in, y.data(), s.outputs + 3, p, isa);
      for (int64_t r = 0; r < s.rows; ++r) {
        ASSERT_EQ(0, std::memcmp(&y[r * (s.outputs + 3)], &ref[r * s.outputs], 4 * s.outputs))
            << "isa " << to_string(isa) << " row " << r << (p ? " threaded" : "");
        for (int i = 0; i < 3; ++i) ASSERT_EQ(y[r * (s.outputs + 3) + s.outputs + i], -1.0f);
      }
    }
  }
}

TEST_P(KQuantMatmulTest, RowResultDoesNotDependOnBatch) {
  const TensorType type = std::get<0>(GetParam());
  const Shape s = kShapes[std::get<1>(GetParam())];
  const auto w = testing::random_weights(type, s.outputs, s.inputs, 3);
  const PackedMatrix packed = PackedMatrix::pack(type, w.data(), s.outputs, s.inputs);
  const int64_t rows = 13;
  const auto x = testing::random_floats(rows * s.inputs, 11);
  QuantizedRows q;
  quantize_rows(x.data(), s.inputs, rows, s.inputs, q);
  for (IsaLevel isa : runnable_isas()) {
    std::vector<float> all(rows * s.outputs);
    matmul(packed, {x.data(), s.inputs, rows, &q}, all.data(), s.outputs, nullptr, isa);
    for (int64_t r = 0; r < rows; ++r) {
      QuantizedRows q1;
      quantize_rows(x.data() + r * s.inputs, s.inputs, 1, s.inputs, q1);
      std::vector<float> one(s.outputs);
      matmul(packed, {x.data() + r * s.inputs, s.inputs, 1, &q1}, one.data(), s.outputs, nullptr, isa);
      ASSERT_EQ(0, std::memcmp(one.data(), &all[r * s.outputs], 4 * s.outputs)) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, KQuantMatmulTest,
                         ::testing::Combine(::testing::ValuesIn(kTypes),
                                            ::testing::Range(0, static_cast<int>(std::size(kShapes)))),
                         [](const auto& info) {
                           return std::string(model::tensor_type_name(std::get<0>(info.param))) +
                                  "_shape" + std::to_string(std::get<1>(info.param));
                         });

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
