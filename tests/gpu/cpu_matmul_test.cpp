// Batched matmul: every ISA path and thread split against the scalar reference (bit-exact, as
// matmul.hpp promises), and against a float64 dequantized product within a per-type tolerance.
#include "gpu/cpu/matmul.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/gpu/cpu_matmul_test_util.hpp"

namespace troupe::gpu::cpu {
namespace {

using model::TensorType;
using testing::MatmulCase;
using testing::MatmulShape;
using testing::MatmulTest;

const MatmulShape kShapes[] = {{16, 32, 1},    {37, 64, 3},    {100, 96, 9}, {5, 160, 8},
                               {576, 576, 17}, {192, 1536, 2}, {48, 32, 64}};
// Float weights take any width: the same shapes and two whose last 32-input block is partial
// (the float kernels ask for the next tile once per 32 inputs).
const MatmulShape kFloatShapes[] = {{16, 32, 1},    {37, 64, 3},    {100, 96, 9},
                                    {5, 160, 8},    {576, 576, 17}, {192, 1536, 2},
                                    {48, 32, 64},   {24, 40, 3},    {33, 100, 9}};

// Error bound against the exact product: float32 rounding of a K-term fma chain (2e-6 of
// sum |w x|), plus, for quantized weights, int8 activation rounding: at most half a step
// (scale / 2) per element, times |w|. Float weights multiply float activations: no rounding.
const TensorType kFloatTypes[] = {TensorType::kF32, TensorType::kF16, TensorType::kBF16};
const TensorType kQuantTypes[] = {TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ8_0};

std::vector<MatmulCase> all_cases() {
  std::vector<MatmulCase> cases = testing::matmul_cases(kFloatTypes, kFloatShapes, 0.0);
  const std::vector<MatmulCase> quant = testing::matmul_cases(kQuantTypes, kShapes, 0.5);
  cases.insert(cases.end(), quant.begin(), quant.end());
  return cases;
}

// The tests themselves: tests/gpu/cpu_matmul_test_util.hpp.
INSTANTIATE_TEST_SUITE_P(Types, MatmulTest, ::testing::ValuesIn(all_cases()),
                         testing::matmul_case_name);

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
// (blocks of zeros, exact .5 ties, large and tiny magnitudes included), at widths of fewer,
// exactly and more than the 16 blocks the AVX-512 form takes at once.
void quantize_matches_scalar(int64_t rows, int64_t cols);

TEST(QuantizeRows, AllPathsMatchScalarBitExact) {
  for (const int64_t cols : {320, 512, 576, 1056}) {
    SCOPED_TRACE(cols);
    quantize_matches_scalar(7, cols);
  }
}

void quantize_matches_scalar(int64_t rows, int64_t cols) {
  auto x = testing::random_floats(rows * cols, 42 + cols, 3.0f);
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
