// The Walsh-Hadamard rotation (see hadamard.hpp): the scalar twin and its AVX-512 form.
#include "gpu/cpu/hadamard.hpp"

#include <cmath>

#include "gpu/cpu/isa_target.hpp"

namespace troupe::gpu::cpu {
namespace {

void rotate_scalar(float* x, int64_t count, int32_t block) {
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

#if TROUPE_X86
// One butterfly stage of span kLen < 16 inside a register: lane l pairs with lane l ^ kLen; the
// lower of the two takes u + v, the upper u - v (u the lower's value, v the upper's).
template <int kLen>
TROUPE_TARGET_AVX512 inline __m512 stage_in_register(__m512 x) {
  __m512 partner;
  if constexpr (kLen == 1) partner = _mm512_permute_ps(x, _MM_SHUFFLE(2, 3, 0, 1));
  if constexpr (kLen == 2) partner = _mm512_permute_ps(x, _MM_SHUFFLE(1, 0, 3, 2));
  if constexpr (kLen == 4) partner = _mm512_shuffle_f32x4(x, x, _MM_SHUFFLE(2, 3, 0, 1));
  if constexpr (kLen == 8) partner = _mm512_shuffle_f32x4(x, x, _MM_SHUFFLE(1, 0, 3, 2));
  __mmask16 upper = 0;
  for (int l = 0; l < 16; ++l) upper |= static_cast<__mmask16>(((l & kLen) != 0) << l);
  return _mm512_mask_sub_ps(_mm512_add_ps(x, partner), upper, partner, x);
}

// rotate_scalar's operations sixteen values at a time (block >= 16).
TROUPE_TARGET_AVX512 void rotate_avx512(float* x, int64_t count, int32_t block) {
  const __m512 scale = _mm512_set1_ps(1.0f / std::sqrt(static_cast<float>(block)));
  for (float* row = x; row < x + count; row += block) {
    for (int32_t j = 0; j < block; j += 16) {
      __m512 v = _mm512_mul_ps(_mm512_loadu_ps(row + j), scale);
      v = stage_in_register<1>(v);
      v = stage_in_register<2>(v);
      v = stage_in_register<4>(v);
      v = stage_in_register<8>(v);
      _mm512_storeu_ps(row + j, v);
    }
    for (int32_t len = 16; len < block; len *= 2) {
      for (int32_t i = 0; i < block; i += 2 * len) {
        for (int32_t j = i; j < i + len; j += 16) {
          const __m512 u = _mm512_loadu_ps(row + j);
          const __m512 v = _mm512_loadu_ps(row + j + len);
          _mm512_storeu_ps(row + j, _mm512_add_ps(u, v));
          _mm512_storeu_ps(row + j + len, _mm512_sub_ps(u, v));
        }
      }
    }
  }
}
#endif

}  // namespace

void hadamard_rotate(float* x, int64_t count, int32_t block, IsaLevel isa) {
#if TROUPE_X86
  if (isa >= IsaLevel::kAvx512Vnni && block >= 16) {
    rotate_avx512(x, count, block);
    return;
  }
#endif
  rotate_scalar(x, count, block);
}

}  // namespace troupe::gpu::cpu
