// K-quant codecs (model/quants/kquant.hpp): hand-built super-blocks with known values (every 6-bit
// scale and min, the high-bit packing of sub-blocks 4..7, Q5_K's fifth bit, Q6_K's quarters and
// signed scales), and quantize -> dequantize within a step of the original.
#include "model/quants/kquant.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "model/fp16.hpp"

namespace troupe::model::quants {
namespace {

TEST(KQuantScales, PackUnpackEveryValueOfEverySubBlock) {
  for (int v = 0; v < 64; ++v) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>((v + 7 * j) % 64);
      mn[j] = static_cast<uint8_t>((v * 3 + 11 * j + 1) % 64);
    }
    uint8_t packed[12];
    pack_scale_min_k4(sc, mn, packed);
    for (int j = 0; j < 8; ++j) {
      const ScaleMin sm = scale_min_k4(j, packed);
      ASSERT_EQ(sm.scale, sc[j]) << "v " << v << " j " << j;
      ASSERT_EQ(sm.min, mn[j]) << "v " << v << " j " << j;
    }
  }
}

// ggml's packing written out by hand: sub-block 5's scale 0b110101 keeps 0101 in byte 9's low
// nibble and 11 in byte 1's top bits; its min 0b101110 keeps 1110 in byte 9's high nibble and
// 10 in byte 5's top bits.
TEST(KQuantScales, HighBitsOfSubBlocksFourToSevenComeFromBytesZeroToSeven) {
  uint8_t s[12] = {};
  s[1] = 0b11000000 | 7;   // scale of sub-block 1 = 7; top bits: scale 5 >> 4 = 0b11
  s[5] = 0b10000000 | 9;   // min of sub-block 1 = 9; top bits: min 5 >> 4 = 0b10
  s[9] = (0b1110 << 4) | 0b0101;
  EXPECT_EQ(scale_min_k4(1, s).scale, 7);
  EXPECT_EQ(scale_min_k4(1, s).min, 9);
  EXPECT_EQ(scale_min_k4(5, s).scale, 0b110101);
  EXPECT_EQ(scale_min_k4(5, s).min, 0b101110);
  EXPECT_EQ(scale_min_k4(4, s).scale, 0);
  EXPECT_EQ(scale_min_k4(6, s).min, 0);
}

// Q4_K with d = 0.5, dmin = 0.25, sub-block j: scale j + 60 (all need the high bits for j >= 4),
// min 63 - j; value i has code i % 16.
TEST(KQuantDequant, Q4_KKnownValues) {
  BlockQ4_K blk{};
  blk.d = fp32_to_fp16(0.5f);
  blk.dmin = fp32_to_fp16(0.25f);
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(j + 56);
    mn[j] = static_cast<uint8_t>(63 - j);
  }
  pack_scale_min_k4(sc, mn, blk.scales);
  for (int i = 0; i < 256; ++i) {
    const int c = i / 64, l = i % 64;
    blk.qs[32 * c + l % 32] |= static_cast<uint8_t>((i % 16) << (l < 32 ? 0 : 4));
  }
  float out[256];
  dequantize_row_q4_k(&blk, 256, out);
  for (int i = 0; i < 256; ++i) {
    const int j = i / 32;
    ASSERT_EQ(q4_k_code(blk, i), i % 16);
    ASSERT_EQ(out[i], 0.5f * (j + 56) * (i % 16) - 0.25f * (63 - j)) << i;
  }
}

// Q5_K: codes i % 32, so the fifth bit (qh bit 2c + half of byte i % 32) alternates per 16.
TEST(KQuantDequant, Q5_KFifthBit) {
  BlockQ5_K blk{};
  blk.d = fp32_to_fp16(1.0f);
  blk.dmin = fp32_to_fp16(0.0f);
  uint8_t sc[8] = {1, 1, 1, 1, 1, 1, 1, 1}, mn[8] = {};
  pack_scale_min_k4(sc, mn, blk.scales);
  for (int i = 0; i < 256; ++i) {
    const int c = i / 64, l = i % 64, q = (i * 7) % 32;
    blk.qs[32 * c + l % 32] |= static_cast<uint8_t>((q & 15) << (l < 32 ? 0 : 4));
    blk.qh[l % 32] |= static_cast<uint8_t>((q >> 4) << (2 * c + l / 32));
  }
  float out[256];
  dequantize_row_q5_k(&blk, 256, out);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(out[i], static_cast<float>((i * 7) % 32)) << i;
}

// Q6_K: element 128h + 32k + l from ql[64h + 32(k % 2) + l] (low nibble for k < 2), qh bits
// 2k..2k+1 of qh[32h + l]; negative sub-scales too.
TEST(KQuantDequant, Q6_KQuartersAndSignedScales) {
  BlockQ6_K blk{};
  blk.d = fp32_to_fp16(0.125f);
  for (int s = 0; s < 16; ++s) blk.scales[s] = static_cast<int8_t>(s % 2 ? -(s + 1) : s + 100);
  for (int i = 0; i < 256; ++i) {
    const int q = (i * 5 + 3) % 64, h = i / 128, k = (i % 128) / 32, l = i % 32;
    blk.ql[64 * h + 32 * (k % 2) + l] |= static_cast<uint8_t>((q & 15) << (k < 2 ? 0 : 4));
    blk.qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
  }
  float out[256];
  dequantize_row_q6_k(&blk, 256, out);
  for (int i = 0; i < 256; ++i) {
    const int s = i / 16, sc = s % 2 ? -(s + 1) : s + 100;
    ASSERT_EQ(q6_k_code(blk, i), (i * 5 + 3) % 64);
    ASSERT_EQ(out[i], 0.125f * sc * ((i * 5 + 3) % 64 - 32)) << i;
  }
}

// The simple quantizer: every value within one quantization step of the original (plus the
// scale quantization's share), for each type.
TEST(KQuantQuantize, RoundTripWithinAStep) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> x(1024), y(1024);
  for (float& v : x) v = normal(rng);
  x[3] = 0.3f;  // an outlier in the first sub-block
  struct Case {
    void (*quantize)(const float*, int64_t, void*);
    void (*dequantize)(const void*, int64_t, float*);
    size_t bytes;
    float rel;  // error bound as a fraction of the super-block's max |x|
  };
  for (const Case& c : {Case{quantize_row_q4_k, dequantize_row_q4_k, sizeof(BlockQ4_K), 0.12f},
                        Case{quantize_row_q5_k, dequantize_row_q5_k, sizeof(BlockQ5_K), 0.06f},
                        Case{quantize_row_q6_k, dequantize_row_q6_k, sizeof(BlockQ6_K), 0.04f}}) {
    std::vector<uint8_t> q(4 * c.bytes);
    c.quantize(x.data(), 1024, q.data());
    c.dequantize(q.data(), 1024, y.data());
    double err = 0;
    for (int sb = 0; sb < 4; ++sb) {
      float amax = 0;
      for (int i = 0; i < 256; ++i) amax = std::max(amax, std::fabs(x[256 * sb + i]));
      for (int i = 0; i < 256; ++i) {
        ASSERT_NEAR(y[256 * sb + i], x[256 * sb + i], c.rel * amax) << "bytes " << c.bytes << " i " << i;
        err += std::fabs(y[256 * sb + i] - x[256 * sb + i]);
      }
    }
    EXPECT_LT(err / 1024, 0.01) << c.bytes;
  }
}

}  // namespace
}  // namespace troupe::model::quants
