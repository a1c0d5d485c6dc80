// K-quant weights (Q4_K, Q5_K, Q6_K) against Q8_K activations (gpu/cpu/matmul_q8k.hpp): ggml's
// activation quantization on a hand-checked block, both of llama.cpp's orders bit-identical between the
// scalar and AVX2 kernels, each within float rounding of the float64 product of what the
// integers stand for, the two orders different in the last bits (the choice matters), and the
// per-row order of matmul_q8k_range. Gemma 3 270M against llama.cpp (cpu_gemma3_test) is the
// end-to-end check of the orders themselves.
#include "gpu/cpu/matmul_q8k.hpp"

#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/cpu/cpu_features.hpp"
#include "model/quants/dequantize.hpp"
#include "tests/gpu/cpu_test_util.hpp"

namespace troupe::gpu::cpu {
namespace {

using model::TensorType;

TEST(Q8K, QuantizesAsGgml) {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = static_cast<float>(i % 17) * 0.25f - 2.0f;
  x[40] = -6.35f;  // the largest magnitude: it gets -127 * sign, d = -max / 127
  BlockQ8K b;
  quantize_row_q8k(x.data(), 256, &b);
  const float iscale = -127.0f / -6.35f;
  EXPECT_EQ(b.d, 1.0f / iscale);
  EXPECT_EQ(b.qs[40], -127);
  for (int i = 0; i < 256; ++i) {
    const float v = iscale * x[i];
    EXPECT_EQ(b.qs[i], static_cast<int8_t>(std::nearbyint(v))) << i;  // half to even
  }
  for (int j = 0; j < 16; ++j) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += b.qs[16 * j + i];
    EXPECT_EQ(b.bsums[j], sum) << j;
  }
  std::vector<float> zero(256, 0.0f);
  quantize_row_q8k(zero.data(), 256, &b);
  EXPECT_EQ(b.d, 0.0f);
  for (int8_t q : b.qs) ASSERT_EQ(q, 0);
}

struct Product {
  std::vector<uint8_t> w;
  std::vector<BlockQ8K> x;
  size_t row_bytes;
};

Product make(TensorType type, int64_t outputs, int64_t inputs, int64_t rows, uint64_t seed) {
  Product p;
  p.w = testing::random_weights(type, outputs, inputs, seed);
  p.row_bytes = model::row_bytes(type, static_cast<uint64_t>(inputs));
  const auto x = testing::random_floats(static_cast<size_t>(rows * inputs), seed + 1, 3.0f);
  p.x.resize(static_cast<size_t>(rows * inputs / kQ8KBlock));
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row_q8k(x.data() + r * inputs, inputs, p.x.data() + r * inputs / kQ8KBlock);
  }
  return p;
}

TEST(Q8K, BothOrdersScalarAndSimdBitIdenticalAndNearTheExactProduct) {
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K}) {
    const int64_t outputs = 19, inputs = 2048, rows = 5;
    const Product p = make(type, outputs, inputs, rows, static_cast<uint64_t>(type));
    int orders_differ = 0;
    for (int64_t o = 0; o < outputs; ++o) {
      const uint8_t* row = p.w.data() + o * p.row_bytes;
      std::vector<float> w(static_cast<size_t>(inputs));
      model::quants::dequantize_row(type, row, inputs, w.data());
      for (int64_t r = 0; r < rows; ++r) {
        const BlockQ8K* x = p.x.data() + r * inputs / kQ8KBlock;
        double exact = 0.0, magnitude = 0.0;
        for (int64_t k = 0; k < inputs; ++k) {
          const BlockQ8K& b = x[k / kQ8KBlock];
          const double xv = static_cast<double>(b.d) * b.qs[k % kQ8KBlock];
          exact += static_cast<double>(w[static_cast<size_t>(k)]) * xv;
          magnitude += std::fabs(static_cast<double>(w[static_cast<size_t>(k)]) * xv);
        }
        float by_order[2];
        for (Q8KOrder order : {Q8KOrder::kVecDot, Q8KOrder::kTiled}) {
          const float want = dot_q8k(type, row, x, inputs, IsaLevel::kScalar, order);
          for (IsaLevel isa : runnable_isas()) {
            const float got = dot_q8k(type, row, x, inputs, isa, order);
            ASSERT_EQ(0, std::memcmp(&got, &want, 4)) << to_string(isa) << " o=" << o << " r=" << r;
          }
          EXPECT_NEAR(want, exact, 1e-5 * magnitude + 1e-6) << "o=" << o << " r=" << r;
          by_order[static_cast<int>(order)] = want;
        }
        orders_differ += by_order[0] != by_order[1];
      }
    }
    EXPECT_GT(orders_differ, 0) << model::tensor_type_name(type);
  }
}

// matmul_q8k_range shares each prepared weight block among up to four rows (7 rows: a group of
// four and one of three) and keeps every row's own order: each result equals the scalar dot.
TEST(Q8K, RangeTakesEachRowsOrder) {
  const int64_t outputs = 33, inputs = 512, rows = 7;
  const Q8KOrder orders[rows] = {Q8KOrder::kTiled,  Q8KOrder::kVecDot, Q8KOrder::kVecDot,
                                 Q8KOrder::kTiled,  Q8KOrder::kTiled,  Q8KOrder::kVecDot,
                                 Q8KOrder::kTiled};
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K}) {
    const Product p = make(type, outputs, inputs, rows, 9);
    for (IsaLevel isa : runnable_isas()) {
      std::vector<float> y(static_cast<size_t>(rows * outputs), -1.0f);
      matmul_q8k_range(type, p.w.data(), p.row_bytes, inputs, p.x.data(), rows, y.data(), outputs,
                       0, outputs, isa, orders);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < outputs; ++o) {
          const float want = dot_q8k(type, p.w.data() + o * p.row_bytes,
                                     p.x.data() + r * inputs / kQ8KBlock, inputs, IsaLevel::kScalar,
                                     orders[r]);
          const float got = y[static_cast<size_t>(r * outputs + o)];
          ASSERT_EQ(0, std::memcmp(&got, &want, 4))
              << model::tensor_type_name(type) << " " << to_string(isa) << " r=" << r << " o=" << o;
        }
      }
    }
  }
}

}  // namespace
}  // namespace troupe::gpu::cpu
