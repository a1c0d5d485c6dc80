// IEEE binary16 (fp16) and bfloat16, the one codec of the tree: GGUF's F16/BF16 tensors and
// quant-block scales (little-endian, possibly unaligned), the CPU backend's fp16 KV, and the
// tests that compare the CUDA kernels against it.
//
// fp16_to_fp32 is exact (as F16C's vcvtph2ps); fp32_to_fp16 rounds to nearest even (as
// vcvtps2ph with rounding mode 0), so scalar and SIMD paths store identical KV bits. Portable
// C++ (no _Float16), so every compiler and ISA level gets the same bits.
//
// Thread-safety: pure functions.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace troupe::model {

inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3FFu) << 13);
    }
  } else if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to inf
  if (abs < 0x38800000u) {  // result is subnormal or zero
    // Add 0.5 (as float) so the FPU's own round-to-nearest-even does the work.
    const float shifted = std::bit_cast<float>(abs) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3F000000u));
  }
  const uint32_t mant_odd = (abs >> 13) & 1u;
  uint32_t r = abs + 0xC8000FFFu + mant_odd;  // rebias exponent (-112 << 23) and round
  return static_cast<uint16_t>(sign | (r >> 13));
}

inline float bf16_to_fp32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

inline uint16_t fp32_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// A little-endian 16-bit value at any alignment (inside a quant block).
inline uint16_t load_u16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// An fp16 as GGUF stores it (a block scale, say), read as float.
inline float load_half(const void* p) { return fp16_to_fp32(load_u16(p)); }

// Stores f rounded to fp16 and returns the stored value (what a dequantizer will read back).
inline float store_half(void* p, float f) {
  const uint16_t h = fp32_to_fp16(f);
  std::memcpy(p, &h, sizeof h);
  return fp16_to_fp32(h);
}

}  // namespace troupe::model
