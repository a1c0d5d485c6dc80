// Q5_0 / Q5_1 codecs (model/quants/q5.hpp): hand-built blocks with known values (qh bit i is the
// fifth bit of value i, little-endian; nibble j holds values j and j + 16), and ggml's reference
// quantizers round-tripping within half a step.
#include "model/quants/q5.hpp"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "model/fp16.hpp"

namespace troupe::model::quants {
namespace {

// Codes chosen so every value differs: code(i) = (7 * i + 3) % 32 (a permutation of 0..31).
int test_code(int i) {
  return (7 * i + 3) % 32;
}

// Writes test_code by hand: low nibble of value j / j + 16 in qs[j] low / high; fifth bits in a
// little-endian uint32 (byte k holds values 8k..8k+7, bit 0 first).
void write_codes(uint8_t* qh, uint8_t* qs) {
  std::memset(qh, 0, 4);
  for (int j = 0; j < 16; ++j)
    qs[j] = static_cast<uint8_t>((test_code(j) & 15) | (test_code(j + 16) & 15) << 4);
  for (int i = 0; i < 32; ++i) {
    if (test_code(i) & 16) qh[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
  }
}

TEST(Q5Codes, QhBitOrderIsValueIndexLittleEndian) {
  // Only value 9's fifth bit set: byte 1, bit 1. Only value 30's: byte 3, bit 6.
  BlockQ5_0 blk{};
  blk.qh[1] = 0x02;
  for (int i = 0; i < 32; ++i) EXPECT_EQ(q5_code(blk, i), i == 9 ? 16 : 0) << i;
  blk = BlockQ5_0{};
  blk.qh[3] = 0x40;
  blk.qs[14] = 0xA5;  // value 14: 5, value 30: 10
  for (int i = 0; i < 32; ++i) EXPECT_EQ(q5_code(blk, i), i == 30 ? 26 : i == 14 ? 5 : 0) << i;
}

TEST(Q5Codes, HandBuiltQ5_0Block) {
  BlockQ5_0 blk[2] = {};
  for (int b = 0; b < 2; ++b) {
    blk[b].d = fp32_to_fp16(b == 0 ? 0.5f : -0.25f);
    write_codes(blk[b].qh, blk[b].qs);
  }
  float out[64];
  dequantize_row_q5_0(blk, 64, out);
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(q5_code(blk[i / 32], i % 32), test_code(i % 32));
    ASSERT_EQ(out[i], (i < 32 ? 0.5f : -0.25f) * static_cast<float>(test_code(i % 32) - 16)) << i;
  }
}

TEST(Q5Codes, HandBuiltQ5_1Block) {
  BlockQ5_1 blk{};
  blk.d = fp32_to_fp16(0.125f);
  blk.m = fp32_to_fp16(-2.0f);
  write_codes(blk.qh, blk.qs);
  float out[32];
  dequantize_row_q5_1(&blk, 32, out);
  for (int i = 0; i < 32; ++i)
    ASSERT_EQ(out[i], 0.125f * static_cast<float>(test_code(i)) - 2.0f) << i;
}

TEST(Q5Quantize, RoundTripWithinHalfAStep) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(32 * 9);
  for (float& v : x) v = dist(rng);
  std::vector<BlockQ5_0> b0(9);
  std::vector<BlockQ5_1> b1(9);
  quantize_row_q5_0(x.data(), static_cast<int64_t>(x.size()), b0.data());
  quantize_row_q5_1(x.data(), static_cast<int64_t>(x.size()), b1.data());
  std::vector<float> y0(x.size()), y1(x.size());
  dequantize_row_q5_0(b0.data(), static_cast<int64_t>(x.size()), y0.data());
  dequantize_row_q5_1(b1.data(), static_cast<int64_t>(x.size()), y1.data());
  for (size_t b = 0; b < 9; ++b) {
    float amax = 0, lo = x[32 * b], hi = lo;
    for (int i = 0; i < 32; ++i) {
      amax = std::max(amax, std::fabs(x[32 * b + i]));
      lo = std::min(lo, x[32 * b + i]);
      hi = std::max(hi, x[32 * b + i]);
    }
    // Half a step plus the fp16 rounding of d (and of m), at most 31 steps away. Q5_0 maps the
    // signed extreme to code 0 (d = max / -16), so the opposite sign clamps at code 31: up to a
    // whole step there (ggml's behaviour).
    const float step0 = amax / 16.0f, step1 = (hi - lo) / 31.0f;
    for (int i = 0; i < 32; ++i) {
      const size_t k = 32 * b + i;
      const bool clamped = q5_code(b0[b], i) == 31;
      EXPECT_NEAR(y0[k], x[k], (clamped ? 1.0f : 0.5f) * step0 + 32 * step0 * 1e-3f) << k;
      EXPECT_NEAR(y1[k], x[k], 0.5f * step1 + 32 * step1 * 1e-3f + std::fabs(lo) * 1e-3f) << k;
    }
  }
}

}  // namespace
}  // namespace troupe::model::quants
