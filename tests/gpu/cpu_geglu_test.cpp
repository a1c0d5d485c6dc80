// GEGLU (gemma3's gate) as ggml computes it: the fp16 GELU table against entries read from the
// reference build's ggml_table_gelu_f16 (the one where an unfused 1 + 0.044715 x^2 differs), the
// table within fp16 rounding of the float64 formula, and the +-10 cut-offs.
#include "gpu/cpu/geglu.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "model/fp16.hpp"

namespace troupe::gpu::cpu {
namespace {

TEST(Geglu, TableHoldsGgmlEntries) {
  // Read from build-peer-parity/bin/libggml-cpu.so after ggml_cpu_init (2026-12-05): all 63,490
  // finite entries agree with troupe's table; 0xbfff is the one the unfused formula rounds to
  // 0xa9d2.
  EXPECT_EQ(gelu_fp16_table_entry(0xbfff), 0xa9d3);
  EXPECT_EQ(gelu_fp16_table_entry(0x3c00), 0x3abb);  // gelu(1)
  EXPECT_EQ(gelu_fp16_table_entry(0xbc00), 0xb115);  // gelu(-1)
  EXPECT_EQ(gelu_fp16_table_entry(0x4000), 0x3fd2);  // gelu(2)
  EXPECT_EQ(gelu_fp16_table_entry(0x0000), 0x0000);
}

TEST(Geglu, WithinFp16RoundingOfTheFormula) {
  std::vector<float> gate, up;
  for (int i = -1200; i <= 1200; ++i) {
    gate.push_back(static_cast<float>(i) * 0.01f);
    up.push_back(1.0f + static_cast<float>(i % 7) * 0.25f);
  }
  std::vector<float> got(gate.size()), want(gate.size());
  geglu(gate.data(), up.data(), got.data(), static_cast<int64_t>(gate.size()));
  geglu_reference(gate.data(), up.data(), want.data(), static_cast<int64_t>(gate.size()));
  for (size_t i = 0; i < got.size(); ++i) {
    // the input and the table entry are fp16: 2^-10 relative each, times |up| <= 2.5
    const double bound = 2.5 * (std::fabs(want[i]) * 2e-3 + std::fabs(gate[i]) * 1e-3) + 1e-6;
    ASSERT_NEAR(got[i], want[i], bound) << "gate " << gate[i];
  }
}

TEST(Geglu, CutOffsPassThroughOrZero) {
  const float gate[] = {-10.0f, -50.0f, 10.0f, 31.5f};
  const float up[] = {3.0f, 3.0f, 0.5f, -2.0f};
  float out[4];
  geglu(gate, up, out, 4);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], 5.0f);
  EXPECT_EQ(out[3], -63.0f);
}

}  // namespace
}  // namespace troupe::gpu::cpu
