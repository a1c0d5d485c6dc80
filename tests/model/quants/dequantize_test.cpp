// The dequantizer by type (model/quants/dequantize.hpp): each type goes to its format's own
// dequantizer, plain types decode as themselves, and types without a reference are refused.
#include "model/quants/dequantize.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "model/fp16.hpp"
#include "model/quants/kquant.hpp"
#include "model/quants/q4_q8.hpp"
#include "model/quants/q5.hpp"

namespace troupe::model::quants {
namespace {

TEST(DequantizeByType, BlockTypesUseTheirFormatsDequantizer) {
  struct Case {
    TensorType type;
    void (*dequantize)(const void*, int64_t, float*);
  };
  const Case cases[] = {{TensorType::kQ4_0, dequantize_row_q4_0}, {TensorType::kQ4_1, dequantize_row_q4_1},
                        {TensorType::kQ8_0, dequantize_row_q8_0}, {TensorType::kQ5_0, dequantize_row_q5_0},
                        {TensorType::kQ5_1, dequantize_row_q5_1}, {TensorType::kQ4_K, dequantize_row_q4_k},
                        {TensorType::kQ5_K, dequantize_row_q5_k}, {TensorType::kQ6_K, dequantize_row_q6_k}};
  const int64_t n = 512;
  for (const Case& c : cases) {
    // Bytes with sane fp16 scales: 0x3C00 (1.0) everywhere a scale could sit, codes in between.
    std::vector<uint8_t> row(row_bytes(c.type, n));
    for (size_t i = 0; i < row.size(); ++i) row[i] = static_cast<uint8_t>(i % 2 ? 0x3C : (i * 37) % 251);
    std::vector<float> want(n), got(n);
    c.dequantize(row.data(), n, want.data());
    ASSERT_TRUE(can_dequantize(c.type));
    dequantize_row(c.type, row.data(), n, got.data());
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), 4 * n)) << tensor_type_name(c.type);
  }
}

TEST(DequantizeByType, PlainTypes) {
  const float f32[3] = {1.5f, -2.0f, 0.0f};
  const uint16_t f16[3] = {fp32_to_fp16(1.5f), fp32_to_fp16(-2.0f), fp32_to_fp16(65504.0f)};
  const uint16_t bf16[3] = {fp32_to_bf16(1.5f), fp32_to_bf16(-2.0f), fp32_to_bf16(3e38f)};
  float out[3];
  dequantize_row(TensorType::kF32, f32, 3, out);
  EXPECT_EQ(0, std::memcmp(out, f32, sizeof out));
  dequantize_row(TensorType::kF16, f16, 3, out);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 65504.0f);
  dequantize_row(TensorType::kBF16, bf16, 3, out);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], bf16_to_fp32(fp32_to_bf16(3e38f)));
}

TEST(DequantizeByType, RefusesTypesWithoutAReference) {
  std::vector<uint8_t> row(1024);
  float out[256];
  for (TensorType t : {TensorType::kQ2_K, TensorType::kQ3_K, TensorType::kQ8_K, TensorType::kQ8_1,
                       TensorType::kI32, TensorType::kF64}) {
    EXPECT_FALSE(can_dequantize(t)) << tensor_type_name(t);
    EXPECT_THROW(dequantize_row(t, row.data(), 32, out), std::invalid_argument) << tensor_type_name(t);
  }
}

// Every layout-only K struct still has GGUF's size, through the type table.
TEST(DequantizeByType, LayoutOnlyStructsSizeTheTypeTable) {
  EXPECT_EQ(traits_of(TensorType::kQ2_K).block_bytes, 84u);
  EXPECT_EQ(traits_of(TensorType::kQ3_K).block_bytes, 110u);
  EXPECT_EQ(traits_of(TensorType::kQ8_K).block_bytes, 292u);
  EXPECT_EQ(traits_of(TensorType::kQ6_K).block_elements, 256u);
}

}  // namespace
}  // namespace troupe::model::quants
