// libm_expf_x8_avx2 and libm_expf_x16_avx512 (gpu/cpu/libm_expf.hpp) against this process's
// expf: every float of the
// softmax's domain [-104, 0] and -inf, bit for bit (SLOW: ~1.1e9 libm calls, seconds in
// Release), and the agreement check the kernels rely on.
#include "gpu/cpu/libm_expf.hpp"

#include <gnu/libc-version.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <algorithm>
#include <cstdint>
#include <string>

#include "gpu/cpu/cpu_features.hpp"

namespace troupe::gpu::cpu {
namespace {

bool has_avx2() { return supported_isa() != IsaLevel::kScalar; }
bool has_avx512() { return supported_isa() >= IsaLevel::kAvx512Vnni; }

using Form = void (*)(const float*, float*, int64_t);

// libm_expf reproduces glibc 2.36's expf (Debian 12, this project's machines); elsewhere the
// kernels fall back to std::exp when the once-per-process check disagrees, and these tests say
// so instead of failing.
std::string other_libm() {
  const std::string version = gnu_get_libc_version();
  return version == "2.36" ? std::string() : "glibc " + version + ", not 2.36";
}

// Compares lanes of [first, last] (float bit patterns, stepping by `stride`); returns the
// number of mismatches and reports the first few.
// `lanes`: the form's width (8 or 16).
int64_t mismatches(uint32_t first, uint32_t last, uint32_t stride, Form form = libm_expf_avx2,
                   int lanes = 8) {
  int64_t bad = 0;
  float x[16], y[16];
  for (uint64_t bits = first; bits <= last; bits += uint64_t{static_cast<uint32_t>(lanes)} * stride) {
    for (int i = 0; i < lanes; ++i) {
      x[i] = std::bit_cast<float>(static_cast<uint32_t>(std::min<uint64_t>(bits + i * stride, last)));
    }
    form(x, y, lanes);
    for (int i = 0; i < lanes; ++i) {
      const float want = std::exp(x[i]);
      if (std::bit_cast<uint32_t>(y[i]) != std::bit_cast<uint32_t>(want) && ++bad <= 5) {
        ADD_FAILURE() << "expf(" << std::hexfloat << x[i] << ") = " << want << ", x" << lanes
                      << " gives " << y[i];
      }
    }
  }
  return bad;
}

TEST(LibmExpf, AgreesWithThisLibmOnASpreadAndTheEdges) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2";
  if (const std::string other = other_libm(); !other.empty()) GTEST_SKIP() << other;
  EXPECT_TRUE(libm_expf_x8_agrees());
  EXPECT_EQ(mismatches(0x80000000u, 0xC2D00000u, 997), 0);  // -0 down to -104, every 997th
  const float x[8] = {-INFINITY, -0x1.9fe368p6f, -0x1.9fe366p6f, -0x1.9d1d9ep6f,
                                  -0x1.9d1d9cp6f, -87.33655f, -1e-45f, 0.0f};
  float y[8];
  libm_expf_avx2(x, y, 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(std::exp(x[i]))) << x[i];
  }
}

// Every float in [-104, 0]: what the q8_0 softmax can pass (scores minus their running maximum).
TEST(LibmExpf, EqualsExpfOnEveryFloatOfTheSoftmaxDomain) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2";
  if (const std::string other = other_libm(); !other.empty()) GTEST_SKIP() << other;
  EXPECT_EQ(mismatches(0x80000000u, 0xC2D00000u, 1), 0);
}

TEST(LibmExpf, SixteenLanesAgreeWithThisLibmOnASpreadAndTheEdges) {
  if (!has_avx512()) GTEST_SKIP() << "no AVX-512 VNNI";
  if (const std::string other = other_libm(); !other.empty()) GTEST_SKIP() << other;
  EXPECT_TRUE(libm_expf_x16_agrees());
  EXPECT_EQ(mismatches(0x80000000u, 0xC2D00000u, 997, libm_expf_avx512, 16), 0);
  const float x[16] = {-INFINITY,     -0x1.9fe368p6f, -0x1.9fe366p6f, -0x1.9d1d9ep6f,
                       -0x1.9d1d9cp6f, -87.33655f,     -1e-45f,        0.0f,
                       -0.5f,          -1.0f,          -2.5f,          -10.0f,
                       -20.0f,         -50.0f,         -80.0f,         -0x1.fffffep-1f};
  float y[16];
  libm_expf_avx512(x, y, 16);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(std::exp(x[i]))) << x[i];
  }
}

TEST(LibmExpf, SixteenLanesEqualExpfOnEveryFloatOfTheSoftmaxDomain) {
  if (!has_avx512()) GTEST_SKIP() << "no AVX-512 VNNI";
  if (const std::string other = other_libm(); !other.empty()) GTEST_SKIP() << other;
  EXPECT_EQ(mismatches(0x80000000u, 0xC2D00000u, 1, libm_expf_avx512, 16), 0);
}

}  // namespace
}  // namespace troupe::gpu::cpu
