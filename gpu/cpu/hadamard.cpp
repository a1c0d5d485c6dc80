// The Walsh-Hadamard rotation (see hadamard.hpp).
#include "gpu/cpu/hadamard.hpp"

#include <cmath>

namespace troupe::gpu::cpu {

void hadamard_rotate(float* x, int64_t count, int32_t block) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(block));
  for (float* row = x; row < x + count; row += block) {
    for (int32_t j = 0; j < block; ++j) row[j] *= scale;
    for (int32_t len = 1; len < block; len *= 2) {
      for (int32_t i = 0; i < block; i += 2 * len) {
        for (int32_t j = i; j < i + len; ++j) {
          const float u = row[j];
          const float v = row[j + len];
          row[j] = u + v;
          row[j + len] = u - v;
        }
      }
    }
  }
}

}  // namespace troupe::gpu::cpu
