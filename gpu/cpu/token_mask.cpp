// Token bitmask application (see token_mask.hpp).
#include "gpu/cpu/token_mask.hpp"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <limits>

namespace troupe::gpu::cpu {

int32_t apply_token_bitmask(std::span<float> logits, std::span<const uint32_t> bitmask) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  const size_t n = logits.size();
  const size_t covered = std::min(n, bitmask.size() * 32);
  int32_t num_allowed = 0;
  // Masks are mostly whole words: all ones inside a JSON string (almost any token), all zeros at
  // a structural position (almost none). All-one words are skipped, runs of all-zero words are
  // filled in one go (a long fill vectorises), and in a mixed word only the minority bits are
  // visited (count-trailing-zeros loops, no branch per token).
  size_t w = 0;
  while (w * 32 < covered) {
    const size_t begin = w * 32;
    const size_t width = std::min<size_t>(32, covered - begin);
    const uint32_t valid = width == 32 ? ~uint32_t{0} : (uint32_t{1} << width) - 1;
    const uint32_t allowed = bitmask[w] & valid;
    float* p = logits.data() + begin;
    ++w;
    num_allowed += std::popcount(allowed);
    if (allowed == valid) continue;
    if (allowed == 0) {
      while (w * 32 < covered && bitmask[w] == 0) ++w;
      std::fill(p, logits.data() + std::min(w * 32, covered), kMasked);
      continue;
    }
    if (std::popcount(allowed) * 2 < static_cast<int>(width)) {
      // Few allowed: keep them aside, fill the word, put them back.
      float kept[32];
      for (uint32_t bits = allowed; bits != 0; bits &= bits - 1) {
        kept[std::countr_zero(bits)] = p[std::countr_zero(bits)];
      }
      std::fill(p, p + width, kMasked);
      for (uint32_t bits = allowed; bits != 0; bits &= bits - 1) {
        p[std::countr_zero(bits)] = kept[std::countr_zero(bits)];
      }
    } else {
      for (uint32_t bits = ~allowed & valid; bits != 0; bits &= bits - 1) {
        p[std::countr_zero(bits)] = kMasked;
      }
    }
  }
  std::fill(logits.begin() + covered, logits.end(), kMasked);
  return num_allowed;
}

}  // namespace troupe::gpu::cpu
