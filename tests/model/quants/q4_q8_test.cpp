// Q4_0 / Q4_1 / Q8_0 (model/quants/q4_q8.hpp): the structs have GGUF's sizes, and hand-built
// blocks with known scales and codes dequantize to the values ggml's formulas give (nibble j
// holds values j and j + 16, not interleaved pairs).
#include "model/quants/q4_q8.hpp"

#include <gtest/gtest.h>

#include "model/fp16.hpp"
#include "model/tensor_type.hpp"

namespace troupe::model::quants {
namespace {

// Nibbles 0..15 in order: value j (j < 16) has code j, value j + 16 has code 15 - j.
template <class Block>
void put_nibbles(Block& blk) {
  for (int j = 0; j < 16; ++j) blk.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
}
int nibble_code(int i) { return i < 16 ? i : 15 - (i - 16); }

TEST(Q4Q8Blocks, GeometryMatchesTheTypeTable) {
  EXPECT_EQ(traits_of(TensorType::kQ4_0).block_bytes, sizeof(BlockQ4_0));
  EXPECT_EQ(traits_of(TensorType::kQ4_1).block_bytes, sizeof(BlockQ4_1));
  EXPECT_EQ(traits_of(TensorType::kQ8_0).block_bytes, sizeof(BlockQ8_0));
  EXPECT_EQ(traits_of(TensorType::kQ8_1).block_bytes, sizeof(BlockQ8_1));
  EXPECT_EQ(traits_of(TensorType::kQ4_1).block_elements, 32u);
  EXPECT_EQ(row_bytes(TensorType::kQ4_1, 576), 18u * 20u);
}

TEST(Q4Q8Blocks, NibbleJHoldsValuesJAndJPlus16) {
  BlockQ4_0 blk{};
  blk.qs[3] = 0xA5;
  for (int i = 0; i < 32; ++i) EXPECT_EQ(q4_code(blk.qs, i), i == 3 ? 5 : i == 19 ? 10 : 0) << i;
}

// d = 0.5, m = -1 and nibbles 0..15: value = 0.5 * code - 1.
TEST(Q4Q8Dequant, Q4_1KnownValues) {
  BlockQ4_1 blk{};
  blk.d = fp32_to_fp16(0.5f);
  blk.m = fp32_to_fp16(-1.0f);
  put_nibbles(blk);
  float out[32];
  dequantize_row_q4_1(&blk, 32, out);
  for (int i = 0; i < 32; ++i) ASSERT_EQ(out[i], 0.5f * nibble_code(i) - 1.0f) << i;
  EXPECT_EQ(out[0], -1.0f);
  EXPECT_EQ(out[15], 6.5f);
  EXPECT_EQ(out[16], 6.5f);
}

// Q4_0 centres codes at 8: d = -0.25 gives -0.25 * (code - 8); two blocks, each its own scale.
TEST(Q4Q8Dequant, Q4_0KnownValuesOverTwoBlocks) {
  BlockQ4_0 blk[2] = {};
  blk[0].d = fp32_to_fp16(-0.25f);
  blk[1].d = fp32_to_fp16(2.0f);
  put_nibbles(blk[0]);
  put_nibbles(blk[1]);
  float out[64];
  dequantize_row_q4_0(blk, 64, out);
  for (int i = 0; i < 64; ++i) {
    const float d = i < 32 ? -0.25f : 2.0f;
    ASSERT_EQ(out[i], d * static_cast<float>(nibble_code(i % 32) - 8)) << i;
  }
  EXPECT_EQ(out[32], -16.0f);
}

// Q8_0: signed codes, -128 and 127 included (the dequantizer takes any byte).
TEST(Q4Q8Dequant, Q8_0KnownValues) {
  BlockQ8_0 blk{};
  blk.d = fp32_to_fp16(0.125f);
  for (int i = 0; i < 32; ++i) blk.qs[i] = static_cast<int8_t>(i * 8 - 128);
  blk.qs[31] = 127;
  float out[32];
  dequantize_row_q8_0(&blk, 32, out);
  for (int i = 0; i < 31; ++i) ASSERT_EQ(out[i], 0.125f * (i * 8 - 128)) << i;
  EXPECT_EQ(out[31], 15.875f);
}

// A subnormal fp16 scale decodes exactly (the codec is model/fp16.hpp's).
TEST(Q4Q8Dequant, SubnormalScale) {
  BlockQ8_0 blk{};
  blk.d = 0x0001;  // 2^-24
  blk.qs[0] = 64;
  float out[32];
  dequantize_row_q8_0(&blk, 32, out);
  EXPECT_EQ(out[0], 64.0f * 0x1p-24f);
  EXPECT_EQ(out[1], 0.0f);
}

}  // namespace
}  // namespace troupe::model::quants
