// The CPU matmul tests shared by the suites of each family of weight types (gtest's abstract
// parameterised tests): every ISA path and thread split against the scalar reference, the
// reference against a float64 product, batch invariance. A suite's file supplies only its types,
// its shapes and its bound, and instantiates MatmulTest with them. It defines tests: include it
// from one .cpp per test binary.
#pragma once

#include <cmath>
#include <cstring>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/cpu/matmul.hpp"
#include "gpu/cpu/thread_pool.hpp"
#include "model/quants/dequantize.hpp"
#include "tests/gpu/cpu_test_util.hpp"

namespace troupe::gpu::cpu::testing {

struct MatmulShape {
  int64_t outputs, inputs, rows;
};

// One test case: a weight type on one shape of its suite's list (the index names the case), and
// the bound's activation rounding (see MatmulTest.AllPathsMatchReferenceBitExact).
struct MatmulCase {
  model::TensorType type;
  MatmulShape shape;
  int shape_index;
  double activation_steps;
};

// gtest prints parameters with this: "Q4_K outputs=37 inputs=256 rows=3 activation_steps=0.6".
inline void PrintTo(const MatmulCase& c, std::ostream* os) {
  *os << model::tensor_type_name(c.type) << " outputs=" << c.shape.outputs
      << " inputs=" << c.shape.inputs << " rows=" << c.shape.rows
      << " activation_steps=" << c.activation_steps;
}

// Every type on every shape, type-major (the order of ::testing::Combine), all with one bound.
inline std::vector<MatmulCase> matmul_cases(std::span<const model::TensorType> types,
                                            std::span<const MatmulShape> shapes,
                                            double activation_steps) {
  std::vector<MatmulCase> cases;
  for (model::TensorType type : types) {
    for (size_t i = 0; i < shapes.size(); ++i)
      cases.push_back({type, shapes[i], static_cast<int>(i), activation_steps});
  }
  return cases;
}

// "Q4_K_shape3": type name and index into the suite's shape list.
inline std::string matmul_case_name(const ::testing::TestParamInfo<MatmulCase>& info) {
  return std::string(model::tensor_type_name(info.param.type)) + "_shape" +
         std::to_string(info.param.shape_index);
}

class MatmulTest : public ::testing::TestWithParam<MatmulCase> {};

// The float64 product of the weights dequantized by the reference dequantizers of
// model/quants/ with the exact activations, and a bound on how far a matmul may be from it:
//   1e-7 + sum_k (2e-6 |w_k x_k| + activation_steps |w_k| step_k)
// float32 rounding of the K-term chains, plus `activation_steps` of the int8 activation's
// quantization step per element. [row][output].
struct DequantizedProduct {
  std::vector<double> exact, bound;
};
inline DequantizedProduct dequantized_product(model::TensorType type, const std::vector<uint8_t>& w,
                                              const std::vector<float>& x, const QuantizedRows& q,
                                              MatmulShape s, double activation_steps) {
  DequantizedProduct p{std::vector<double>(s.rows * s.outputs), std::vector<double>(s.rows * s.outputs)};
  std::vector<float> wrow(s.inputs);
  for (int64_t o = 0; o < s.outputs; ++o) {
    model::quants::dequantize_row(type, w.data() + o * model::row_bytes(type, s.inputs), s.inputs,
                                  wrow.data());
    for (int64_t r = 0; r < s.rows; ++r) {
      double exact = 0, bound = 1e-7;
      for (int64_t k = 0; k < s.inputs; ++k) {
        const double wx = static_cast<double>(wrow[k]) * x[r * s.inputs + k];
        exact += wx;
        bound += 2e-6 * std::fabs(wx);
        if (activation_steps > 0) {
          const float scale = q.scale[(r * s.inputs + k) / kQuantBlock];
          bound += std::fabs(wrow[k]) * activation_steps * scale;
        }
      }
      p.exact[r * s.outputs + o] = exact;
      p.bound[r * s.outputs + o] = bound;
    }
  }
  return p;
}

// The rows' int8 activations, for a width of whole 32-input blocks; nullptr for another (only a
// float packing takes one, and it reads no activation blocks).
inline const QuantizedRows* quantize_whole_blocks(const float* x, int64_t cols, int64_t rows,
                                                  QuantizedRows& q) {
  if (cols % kQuantBlock != 0) return nullptr;
  quantize_rows(x, cols, rows, cols, q);
  return &q;
}

// The scalar reference is within the bound of the dequantized product, and every runnable ISA,
// unthreaded and on 3 threads, gives the reference's bits (writing nothing past num_outputs in
// a padded output row). Only a quantized packing multiplies int8 activations, so the packing must
// be quantized exactly when activation_steps > 0.
TEST_P(MatmulTest, AllPathsMatchReferenceBitExact) {
  const model::TensorType type = GetParam().type;
  const MatmulShape s = GetParam().shape;
  const double activation_steps = GetParam().activation_steps;
  const auto w = random_weights(type, s.outputs, s.inputs, 42 + s.outputs);
  const auto x = random_floats(s.rows * s.inputs, 7 + s.rows);
  QuantizedRows q;
  const MatmulInput in{x.data(), s.inputs, s.rows,
                       quantize_whole_blocks(x.data(), s.inputs, s.rows, q)};
  std::vector<float> ref(s.rows * s.outputs);
  matmul_reference(type, w.data(), s.outputs, s.inputs, in, ref.data(), s.outputs);

  const DequantizedProduct want = dequantized_product(type, w, x, q, s, activation_steps);
  for (int64_t i = 0; i < s.rows * s.outputs; ++i) {
    ASSERT_NEAR(ref[i], want.exact[i], want.bound[i]) << "row " << i / s.outputs << " output " << i % s.outputs;
  }

  const PackedMatrix packed = PackedMatrix::pack(type, w.data(), s.outputs, s.inputs);
  ASSERT_EQ(packed.quantized(), activation_steps > 0);
  EXPECT_EQ(packed.source_type(), type);
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

// Every runnable ISA's packed matmul agrees with dequantize-then-dot through the reference
// dequantizers (model/quants/) within the bound above, on its own: a packing that misread a
// block would fail here even if the reference path misread it the same way.
TEST_P(MatmulTest, EveryPathAgreesWithReferenceDequantizers) {
  const model::TensorType type = GetParam().type;
  const MatmulShape s = GetParam().shape;
  const auto w = random_weights(type, s.outputs, s.inputs, 5 + s.inputs);
  const auto x = random_floats(s.rows * s.inputs, 13 + s.rows);
  QuantizedRows q;
  const QuantizedRows* qp = quantize_whole_blocks(x.data(), s.inputs, s.rows, q);
  const DequantizedProduct want = dequantized_product(type, w, x, q, s, GetParam().activation_steps);
  const PackedMatrix packed = PackedMatrix::pack(type, w.data(), s.outputs, s.inputs);
  for (IsaLevel isa : runnable_isas()) {
    std::vector<float> y(s.rows * s.outputs);
    matmul(packed, {x.data(), s.inputs, s.rows, qp}, y.data(), s.outputs, nullptr, isa);
    for (int64_t i = 0; i < s.rows * s.outputs; ++i) {
      ASSERT_NEAR(y[i], want.exact[i], want.bound[i])
          << "isa " << to_string(isa) << " row " << i / s.outputs << " output " << i % s.outputs;
    }
  }
}

// On every runnable ISA, each row of a 13-row batch has the bits of that row multiplied alone.
TEST_P(MatmulTest, RowResultDoesNotDependOnBatch) {
  const model::TensorType type = GetParam().type;
  const MatmulShape s = GetParam().shape;
  const auto w = random_weights(type, s.outputs, s.inputs, 3);
  const PackedMatrix packed = PackedMatrix::pack(type, w.data(), s.outputs, s.inputs);
  const int64_t rows = 13;
  const auto x = random_floats(rows * s.inputs, 11);
  QuantizedRows q;
  const QuantizedRows* qp = quantize_whole_blocks(x.data(), s.inputs, rows, q);
  for (IsaLevel isa : runnable_isas()) {
    std::vector<float> all(rows * s.outputs);
    matmul(packed, {x.data(), s.inputs, rows, qp}, all.data(), s.outputs, nullptr, isa);
    for (int64_t r = 0; r < rows; ++r) {
      QuantizedRows q1;
      const QuantizedRows* q1p = quantize_whole_blocks(x.data() + r * s.inputs, s.inputs, 1, q1);
      std::vector<float> one(s.outputs);
      matmul(packed, {x.data() + r * s.inputs, s.inputs, 1, q1p}, one.data(), s.outputs, nullptr,
             isa);
      ASSERT_EQ(0, std::memcmp(one.data(), &all[r * s.outputs], 4 * s.outputs)) << "row " << r;
    }
  }
}

}  // namespace troupe::gpu::cpu::testing
