// RoPE (see rope.hpp). Cheap next to the matmuls, so scalar only. The rotation is written as
// the fma form GCC contracts ggml's rotate_pairs into (x0*c - x1*s -> fma(x0, c, -(x1*s))), so
// rotated q/k are bit-equal to llama.cpp's.
#include "gpu/cpu/rope.hpp"

#include <cmath>

namespace troupe::gpu::cpu {

void rope_table(int32_t pos, const RopeParams& p, float* cos_out, float* sin_out) {
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  float theta_base = static_cast<float>(pos);
  for (int32_t i = 0; i < p.n_rot / 2; ++i) {
    const float theta = p.freq_scale * theta_base;
    cos_out[i] = std::cos(theta);
    sin_out[i] = std::sin(theta);
    theta_base *= theta_scale;
  }
}

void rope_apply(float* x, int32_t num_heads, int32_t head_dim, int32_t n_rot, const float* cos_t,
                const float* sin_t) {
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
                     const float* cos_t, const float* sin_t) {
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
      const double theta = static_cast<double>(pos) * p.freq_scale *
                           std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_rot);
      const double x0 = v[2 * i], x1 = v[2 * i + 1];
      v[2 * i] = static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta));
      v[2 * i + 1] = static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta));
    }
  }
}

}  // namespace troupe::gpu::cpu
