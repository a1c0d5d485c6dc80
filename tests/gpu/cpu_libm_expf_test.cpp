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

// Compares both forms' lanes (the 16-lane one only on a CPU with AVX-512) with libm on the
// floats of [first, last] (bit patterns, stepping by `stride`), libm computing each value once;
// returns the number of mismatches and reports the first few.
int64_t mismatches(uint32_t first, uint32_t last, uint32_t stride) {
  const bool x16 = has_avx512();
  int64_t bad = 0;
  float x[16], want[16], y8[16], y16[16];
  auto check = [&](const float* y, int lanes) {
    for (int i = 0; i < 16; ++i) {
      if (std::bit_cast<uint32_t>(y[i]) != std::bit_cast<uint32_t>(want[i]) && ++bad <= 5) {
        ADD_FAILURE() << "expf(" << std::hexfloat << x[i] << ") = " << want[i] << ", x" << lanes
                      << " gives " << y[i];
      }
    }
  };
  for (uint64_t bits = first; bits <= last; bits += uint64_t{16} * stride) {
    for (int i = 0; i < 16; ++i) {
      x[i] = std::bit_cast<float>(static_cast<uint32_t>(std::min<uint64_t>(bits + i * stride, last)));
      want[i] = std::exp(x[i]);
    }
    libm_expf_avx2(x, y8, 16);
    check(y8, 8);
    if (x16) {
      libm_expf_avx512(x, y16, 16);
      check(y16, 16);
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

// Every float in [-104, 0]: what the q8_0 softmax can pass (scores minus their running maximum),
// through both forms at once.
TEST(LibmExpf, EqualsExpfOnEveryFloatOfTheSoftmaxDomain) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2";
  if (const std::string other = other_libm(); !other.empty()) GTEST_SKIP() << other;
  EXPECT_EQ(mismatches(0x80000000u, 0xC2D00000u, 1), 0);
}

TEST(LibmExpf, SixteenLanesAgreeWithThisLibmOnASpreadAndTheEdges) {
  if (!has_avx512()) GTEST_SKIP() << "no AVX-512 VNNI";
  if (const std::string other = other_libm(); !other.empty()) GTEST_SKIP() << other;
  EXPECT_TRUE(libm_expf_x16_agrees());
  EXPECT_EQ(mismatches(0x80000000u, 0xC2D00000u, 997), 0);
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

}  // namespace
}  // namespace troupe::gpu::cpu
