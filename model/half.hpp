// IEEE half precision (fp16) as GGUF stores it: little-endian, possibly unaligned inside a
// quant block. One place for the conversion the block codecs and the dummy-weight writer use.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

namespace troupe::model {

inline float load_half(const void* p) {
  _Float16 h;
  std::memcpy(&h, p, 2);
  return static_cast<float>(h);
}

// Stores f rounded to fp16 and returns the stored value (what a dequantizer will read back).
inline float store_half(void* p, float f) {
  const _Float16 h = static_cast<_Float16>(f);
  std::memcpy(p, &h, 2);
  return static_cast<float>(h);
}

}  // namespace troupe::model
