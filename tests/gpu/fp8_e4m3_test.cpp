// The FP8 E4M3 conversions (gpu/fp8_e4m3.hpp), the CPU twins of the CUDA KV cache's: every byte
// decoded against the format's definition, and encoding against a brute-force nearest search
// over all finite codes with ties to an even mantissa.
#include "gpu/fp8_e4m3.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace troupe::gpu {
namespace {

// The nearest finite code to x by exact (double) distance; on a tie the even mantissa (the
// low bit clear), and beyond the largest code the largest (saturation).
uint8_t nearest_code(float x) {
  int best = -1;
  double best_distance = std::numeric_limits<double>::infinity();
  for (int code = 0; code < 256; ++code) {
    const float v = fp8_e4m3_to_fp32(static_cast<uint8_t>(code));
    if (std::isnan(v) || std::signbit(v) != std::signbit(x)) continue;
    const double distance = std::fabs(static_cast<double>(v) - static_cast<double>(x));
    if (distance < best_distance || (distance == best_distance && (code & 1) == 0)) {
      best = code;
      best_distance = distance;
    }
  }
  return static_cast<uint8_t>(best);
}

TEST(Fp8E4M3, DecodesTheFormatsLandmarks) {
  EXPECT_EQ(fp8_e4m3_to_fp32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_fp32(0x80)));
  EXPECT_EQ(fp8_e4m3_to_fp32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_fp32(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_fp32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(fp8_e4m3_to_fp32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_fp32(0x39), 1.125f);
  EXPECT_EQ(fp8_e4m3_to_fp32(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_fp32(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_fp32(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_fp32(0xFF)));
  EXPECT_EQ(fp8_e4m3_to_fp32(0x78), 256.0f);  // exponent 15 is finite except mantissa 7
}

TEST(Fp8E4M3, EveryFiniteCodeEncodesToItself) {
  for (int code = 0; code < 256; ++code) {
    const float v = fp8_e4m3_to_fp32(static_cast<uint8_t>(code));
    if (std::isnan(v)) continue;
    EXPECT_EQ(fp32_to_fp8_e4m3(v), code) << "value " << v;
  }
}

TEST(Fp8E4M3, RoundsToNearestWithTiesToEven) {
  // 1 + 1/16 lies halfway between 1 (0x38, even) and 1.125 (0x39): the even one.
  EXPECT_EQ(fp32_to_fp8_e4m3(1.0625f), 0x38);
  // 1.125 + 1/16 lies halfway between 0x39 (odd) and 1.25 (0x3A, even).
  EXPECT_EQ(fp32_to_fp8_e4m3(1.1875f), 0x3A);
  // Halfway between the two smallest subnormals, and below half the smallest.
  EXPECT_EQ(fp32_to_fp8_e4m3(1.5f * std::ldexp(1.0f, -9)), 0x02);
  EXPECT_EQ(fp32_to_fp8_e4m3(0.49f * std::ldexp(1.0f, -9)), 0x00);
  EXPECT_EQ(fp32_to_fp8_e4m3(-0.49f * std::ldexp(1.0f, -9)), 0x80);
  // Carry into the next binade: 1.9375 is halfway between 1.875 (odd) and 2.
  EXPECT_EQ(fp32_to_fp8_e4m3(1.9375f), 0x40);
}

TEST(Fp8E4M3, SaturatesFiniteValuesAndMapsNanToNan) {
  EXPECT_EQ(fp32_to_fp8_e4m3(448.0f), 0x7E);
  EXPECT_EQ(fp32_to_fp8_e4m3(463.0f), 0x7E);
  EXPECT_EQ(fp32_to_fp8_e4m3(1e30f), 0x7E);
  EXPECT_EQ(fp32_to_fp8_e4m3(-1e30f), 0xFE);
  EXPECT_EQ(fp32_to_fp8_e4m3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(fp32_to_fp8_e4m3(std::nanf("")), 0x7F);
}

TEST(Fp8E4M3, EncodingIsTheNearestCodeOverTheWholeRange) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> log_magnitude(-13.0f, 9.5f);
  for (int i = 0; i < 200000; ++i) {
    const float x = ((i & 1) != 0 ? -1.0f : 1.0f) * std::exp2(log_magnitude(rng));
    ASSERT_EQ(fp32_to_fp8_e4m3(x), nearest_code(x)) << "x = " << x;
  }
  // Every midpoint between neighbouring codes, where ties decide.
  for (int code = 0; code < 0x7E; ++code) {
    const double lo = fp8_e4m3_to_fp32(static_cast<uint8_t>(code));
    const double hi = fp8_e4m3_to_fp32(static_cast<uint8_t>(code + 1));
    const auto mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(fp32_to_fp8_e4m3(mid), nearest_code(mid)) << "between codes " << code << " and " << code + 1;
    ASSERT_EQ(fp32_to_fp8_e4m3(-mid), nearest_code(-mid));
  }
}

}  // namespace
}  // namespace troupe::gpu
