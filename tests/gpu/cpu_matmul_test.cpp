// Batched matmul: every ISA path and thread split against the scalar reference (bit-exact, as
// matmul.hpp promises), and against a float64 dequantized product within a per-type tolerance.
#include "gpu/cpu/matmul.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>

#include "gpu/cpu/thread_pool.hpp"
#include "tests/gpu/cpu_test_util.hpp"

namespace troupe::gpu::cpu {
namespace {

using model::TensorType;

struct Shape {
  int64_t outputs, inputs, rows;
};

const Shape kShapes[] = {{16, 32, 1},  {37, 64, 3},   {100, 96, 9},  {5, 160, 8},
                         {576, 576, 17}, {192, 1536, 2}, {48, 32, 64}};

const TensorType kTypes[] = {TensorType::kF32,  TensorType::kF16,  TensorType::kBF16,
                             TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ8_0};

bool is_quant(TensorType t) {
  return t == TensorType::kQ4_0 || t == TensorType::kQ4_1 || t == TensorType::kQ8_0;
}

// Error bound: float32 rounding of a K-term fma chain (2e-6 of sum |w x|), plus, for quantized
// weights, int8 activation rounding: at most half a step (scale / 2) per element, times |w|.

class MatmulTest : public ::testing::TestWithParam<std::tuple<TensorType, int>> {};

TEST_P(MatmulTest, AllPathsMatchReferenceBitExact) {
  const TensorType type = std::get<0>(GetParam());
  const Shape s = kShapes[std::get<1>(GetParam())];
  const auto w = testing::random_weights(type, s.outputs, s.inputs, 42 + s.outputs);
  const auto x = testing::random_floats(s.rows * s.inputs, 7 + s.rows);
  QuantizedRows q;
  quantize_rows(x.data(), s.inputs, s.rows, s.inputs, q);
  const MatmulInput in{x.data(), s.inputs, s.rows, &q};

  std::vector<float> ref(s.rows * s.outputs);
  matmul_reference(type, w.data(), s.outputs, s.inputs, in, ref.data(), s.outputs);

  // Float64 product of the dequantized weights and the exact activations.
  std::vector<float> wrow(s.inputs);
  for (int64_t o = 0; o < s.outputs; ++o) {
    dequantize_row(type, w.data() + o * model::row_bytes(type, s.inputs), s.inputs, wrow.data());
    for (int64_t r = 0; r < s.rows; ++r) {
      double exact = 0, bound = 1e-7;
      for (int64_t k = 0; k < s.inputs; ++k) {
        exact += static_cast<double>(wrow[k]) * x[r * s.inputs + k];
        bound += 2e-6 * std::fabs(static_cast<double>(wrow[k]) * x[r * s.inputs + k]);
        if (is_quant(type)) bound += std::fabs(wrow[k]) * 0.5 * q.scale[(r * s.inputs + k) / 32];
      }
      ASSERT_NEAR(ref[r * s.outputs + o], exact, bound)
          << "row " << r << " output " << o;
    }
  }

  const PackedMatrix packed = PackedMatrix::pack(type, w.data(), s.outputs, s.inputs);
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

TEST_P(MatmulTest, RowResultDoesNotDependOnBatch) {
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
      matmul(packed, {x.data() + r * s.inputs, s.inputs, 1, &q1}, one.data(), s.outputs, nullptr,
             isa);
      ASSERT_EQ(0, std::memcmp(one.data(), &all[r * s.outputs], 4 * s.outputs)) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulTest,
                         ::testing::Combine(::testing::ValuesIn(kTypes),
                                            ::testing::Range(0, static_cast<int>(std::size(kShapes)))),
                         [](const auto& info) {
                           return std::string(model::tensor_type_name(std::get<0>(info.param))) +
                                  "_shape" + std::to_string(std::get<1>(info.param));
                         });

TEST(MatmulPack, RejectsUnsupportedTypeAndBadRowLength) {
  std::vector<uint8_t> w(1024);
  EXPECT_THROW(PackedMatrix::pack(TensorType::kQ2_K, w.data(), 1, 256), std::invalid_argument);
  EXPECT_THROW(PackedMatrix::pack(TensorType::kQ4_K, w.data(), 1, 576), std::invalid_argument);
  EXPECT_THROW(PackedMatrix::pack(TensorType::kQ4_0, w.data(), 1, 48), std::invalid_argument);
}

TEST(QuantizeRows, RoundsToNearestAndKeepsSums) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = static_cast<float>(i - 32) / 7.0f;
  QuantizedRows q;
  quantize_rows(x.data(), 64, 1, 64, q);
  for (int b = 0; b < 2; ++b) {
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      const float v = x[32 * b + i] / q.scale[b];
      EXPECT_LE(std::fabs(v - q.qs[32 * b + i]), 0.5f + 0.07f);  // scale is fp16-rounded
      sum += q.qs[32 * b + i];
    }
    EXPECT_EQ(sum, q.sum[b]);
  }
}

// Every ISA's quantization is the scalar one bit for bit: codes, scales, sums, group biases
// (blocks of zeros, exact .5 ties, large and tiny magnitudes included).
TEST(QuantizeRows, AllPathsMatchScalarBitExact) {
  const int64_t rows = 7, cols = 320;
  auto x = testing::random_floats(rows * cols, 42, 3.0f);
  for (int i = 0; i < 32; ++i) x[i] = 0.0f;                            // an all-zero block
  for (int i = 32; i < 64; ++i) x[i] = static_cast<float>(i - 48) * 0.5f;  // ties after scaling
  for (int i = 64; i < 96; ++i) x[i] *= 1e4f;
  for (int i = 96; i < 128; ++i) x[i] *= 1e-6f;
  QuantizedRows want;
  quantize_rows(x.data(), cols, rows, cols, want, IsaLevel::kScalar);
  for (IsaLevel isa : runnable_isas()) {
    QuantizedRows got;
    quantize_rows(x.data(), cols, rows, cols, got, isa);
    const int64_t nb = rows * cols / 32;
    ASSERT_EQ(0, std::memcmp(want.qs.data(), got.qs.data(), rows * cols)) << to_string(isa);
    ASSERT_EQ(0, std::memcmp(want.scale.data(), got.scale.data(), 4 * nb)) << to_string(isa);
    ASSERT_EQ(0, std::memcmp(want.sum.data(), got.sum.data(), 4 * nb)) << to_string(isa);
    ASSERT_EQ(0, std::memcmp(want.scaled_sum.data(), got.scaled_sum.data(), 4 * nb)) << to_string(isa);
    ASSERT_EQ(0, std::memcmp(want.group_bias.data(), got.group_bias.data(), 4 * nb * 8)) << to_string(isa);
  }
}

}  // namespace
}  // namespace troupe::gpu::cpu
