// RoPE (see rope.hpp). The rotation is written as
// the fma form GCC contracts ggml's rotate_pairs into (x0*c - x1*s -> fma(x0, c, -(x1*s))), so
// rotated q/k are bit-equal to llama.cpp's.
#include "gpu/cpu/rope.hpp"

#include <cmath>

#include "gpu/cpu/isa_target.hpp"

namespace troupe::gpu::cpu {

void rope_table(int32_t pos, const RopeParams& p, float* cos_out, float* sin_out) {
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  float theta_base = static_cast<float>(pos);
  for (int32_t i = 0; i < p.n_rot / 2; ++i) {
    // Divide before scaling, as ggml does (rope_yarn(theta / ff, freq_scale)); without factors
    // this is the plain path's exact float sequence.
    const float theta =
        p.freq_scale * (p.freq_factors != nullptr ? theta_base / p.freq_factors[i] : theta_base);
    cos_out[i] = std::cos(theta);
    sin_out[i] = std::sin(theta);
    theta_base *= theta_scale;
  }
}

namespace {

#if TROUPE_X86
// NORM pairs, 8 at a time: even/odd elements split by shuffles (pair order 0 1 4 5 2 3 6 7,
// the tables permuted to match), rotated with the scalar form's fma and products, re-interleaved.
TROUPE_TARGET_AVX2 void rope_apply_avx2(float* x, int32_t num_heads, int32_t head_dim,
                                        int32_t n_rot, const float* cos_t, const float* sin_t) {
  const int32_t half = n_rot / 2;
  const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int32_t h = 0; h < num_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    int32_t i = 0;
    for (; i + 8 <= half; i += 8) {
      const __m256 a = _mm256_loadu_ps(v + 2 * i), b = _mm256_loadu_ps(v + 2 * i + 8);
      const __m256 x0 = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
      const __m256 x1 = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
      const __m256 c = _mm256_permutevar8x32_ps(_mm256_loadu_ps(cos_t + i), order);
      const __m256 s = _mm256_permutevar8x32_ps(_mm256_loadu_ps(sin_t + i), order);
      const __m256 r0 = _mm256_fmadd_ps(x0, c, _mm256_xor_ps(_mm256_mul_ps(x1, s), sign));
      const __m256 r1 = _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c));
      _mm256_storeu_ps(v + 2 * i, _mm256_unpacklo_ps(r0, r1));
      _mm256_storeu_ps(v + 2 * i + 8, _mm256_unpackhi_ps(r0, r1));
    }
    for (; i < half; ++i) {
      const float x0 = v[2 * i], x1 = v[2 * i + 1];
      v[2 * i] = __builtin_fmaf(x0, cos_t[i], -(x1 * sin_t[i]));
      v[2 * i + 1] = __builtin_fmaf(x0, sin_t[i], x1 * cos_t[i]);
    }
  }
}

TROUPE_TARGET_AVX2 void rope_apply_neox_avx2(float* x, int32_t num_heads, int32_t head_dim,
                                             int32_t n_rot, const float* cos_t,
                                             const float* sin_t) {
  const int32_t half = n_rot / 2;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int32_t h = 0; h < num_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    int32_t i = 0;
    for (; i + 8 <= half; i += 8) {
      const __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + i + half);
      const __m256 c = _mm256_loadu_ps(cos_t + i), s = _mm256_loadu_ps(sin_t + i);
      _mm256_storeu_ps(v + i, _mm256_fmadd_ps(x0, c, _mm256_xor_ps(_mm256_mul_ps(x1, s), sign)));
      _mm256_storeu_ps(v + i + half, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
    }
    for (; i < half; ++i) {
      const float x0 = v[i], x1 = v[i + half];
      v[i] = __builtin_fmaf(x0, cos_t[i], -(x1 * sin_t[i]));
      v[i + half] = __builtin_fmaf(x0, sin_t[i], x1 * cos_t[i]);
    }
  }
}
#endif

}  // namespace

void rope_apply(float* x, int32_t num_heads, int32_t head_dim, int32_t n_rot, const float* cos_t,
                const float* sin_t, IsaLevel isa) {
#if TROUPE_X86
  if (isa != IsaLevel::kScalar) return rope_apply_avx2(x, num_heads, head_dim, n_rot, cos_t, sin_t);
#endif
  (void)isa;
  for (int32_t h = 0; h < num_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int32_t i = 0; i < n_rot / 2; ++i) {
      const float x0 = v[2 * i], x1 = v[2 * i + 1];
      v[2 * i] = std::fma(x0, cos_t[i], -(x1 * sin_t[i]));
      v[2 * i + 1] = std::fma(x0, sin_t[i], x1 * cos_t[i]);
    }
  }
}

void rope_apply_neox(float* x, int32_t num_heads, int32_t head_dim, int32_t n_rot,
                     const float* cos_t, const float* sin_t, IsaLevel isa) {
#if TROUPE_X86
  if (isa != IsaLevel::kScalar) {
    return rope_apply_neox_avx2(x, num_heads, head_dim, n_rot, cos_t, sin_t);
  }
#endif
  (void)isa;
  const int32_t half = n_rot / 2;
  for (int32_t h = 0; h < num_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int32_t i = 0; i < half; ++i) {
      const float x0 = v[i], x1 = v[i + half];
      v[i] = std::fma(x0, cos_t[i], -(x1 * sin_t[i]));
      v[i + half] = std::fma(x0, sin_t[i], x1 * cos_t[i]);
    }
  }
}

void rope_reference(float* x, int32_t num_heads, int32_t head_dim, int32_t pos,
                    const RopeParams& p) {
  for (int32_t h = 0; h < num_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int32_t i = 0; i < p.n_rot / 2; ++i) {
      const double factor = p.freq_factors != nullptr ? p.freq_factors[i] : 1.0;
      const double theta = static_cast<double>(pos) * p.freq_scale *
                           std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_rot) / factor;
      const double x0 = v[2 * i], x1 = v[2 * i + 1];
      v[2 * i] = static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta));
      v[2 * i + 1] = static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta));
    }
  }
}

}  // namespace troupe::gpu::cpu
