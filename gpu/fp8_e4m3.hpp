// FP8 E4M3 (OCP 8-bit float, NVIDIA's __nv_fp8_e4m3): 1 sign bit, 4 exponent bits (bias 7),
// 3 mantissa bits; no infinities, 0x7F/0xFF are NaN, the largest finite magnitude is 448. The
// CUDA backend's `cache.kv_dtype fp8_e4m3` stores K and V this way (gpu/cuda/kv_write.cuh); these
// are the CPU twins of its conversions, bit for bit: round to nearest even, finite values beyond
// 448 saturate to ±448 (cvt.rn.satfinite.e4m3x2.f32, what __nv_cvt_float_to_fp8 with
// __NV_SATFINITE does), NaN becomes 0x7F.
//
// Plain C++17 (the CUDA tests include it too). Thread-safety: pure functions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace troupe::gpu {

inline constexpr float kFp8E4M3Max = 448.0f;

// The value of an E4M3 byte (NaN for 0x7F and 0xFF).
inline float fp8_e4m3_to_fp32(uint8_t bits) {
  const float sign = (bits & 0x80) != 0 ? -1.0f : 1.0f;
  const int exponent = (bits >> 3) & 0xF;
  const int mantissa = bits & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::nanf("");
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);  // subnormal
  return sign * std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
}

// The E4M3 byte nearest to x (ties to an even mantissa), saturating at ±448.
inline uint8_t fp32_to_fp8_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= kFp8E4M3Max) return sign | 0x7E;
  // Every E4M3 magnitude is a multiple of its binade's step: 2^-9 below 2^-6 (subnormals and
  // the first normal binade share it), else 2^(e-3). Rounding a / step to an integer with ties
  // to even is exact in float (a has 24 significant bits, the quotient is a power-of-two
  // scaling), and the integer's low bit is the mantissa's.
  int e = 0;
  (void)std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): the binade is 2^(e-1)
  const int step_exponent = e - 1 < -6 ? -9 : e - 1 - 3;
  const float q = std::nearbyint(std::ldexp(a, -step_exponent));  // default mode: ties to even
  const float rounded = std::ldexp(q, step_exponent);             // may carry into the next binade
  if (rounded == 0.0f) return sign;
  int re = 0;
  const float rf = std::frexp(rounded, &re);
  if (re - 1 < -6) return sign | static_cast<uint8_t>(std::ldexp(rounded, 9));  // subnormal
  const int mantissa = static_cast<int>(std::ldexp(rf, 4)) - 8;                   // rf * 16 in [8, 16)
  return sign | static_cast<uint8_t>(((re - 1 + 7) << 3) | mantissa);
}

}  // namespace troupe::gpu
