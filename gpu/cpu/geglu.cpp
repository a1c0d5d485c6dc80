// GEGLU (see geglu.hpp).
#include "gpu/cpu/geglu.hpp"

#include <array>
#include <cmath>

#include "model/fp16.hpp"

namespace troupe::gpu::cpu {
namespace {

constexpr float kGeluCoefA = 0.044715f;
constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;

float gelu_tanh_f32(float x) {
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * std::fma(kGeluCoefA * x, x, 1.0f)));
}

const std::array<uint16_t, 65536>& gelu_table() {
  static const std::array<uint16_t, 65536> table = [] {
    std::array<uint16_t, 65536> t{};
    for (uint32_t h = 0; h < t.size(); ++h) {
      t[h] = model::fp32_to_fp16(gelu_tanh_f32(model::fp16_to_fp32(static_cast<uint16_t>(h))));
    }
    return t;
  }();
  return table;
}

}  // namespace

uint16_t gelu_fp16_table_entry(uint16_t h) { return gelu_table()[h]; }

void geglu(const float* gate, const float* up, float* out, int64_t n) {
  const std::array<uint16_t, 65536>& table = gelu_table();
  for (int64_t i = 0; i < n; ++i) {
    const float z = gate[i];
    if (z <= -10.0f) {
      out[i] = 0.0f;
    } else if (z >= 10.0f) {
      out[i] = z * up[i];
    } else {
      out[i] = model::fp16_to_fp32(table[model::fp32_to_fp16(z)]) * up[i];
    }
  }
}

void geglu_reference(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double z = gate[i];
    const double g = 0.5 * z * (1.0 + std::tanh(0.79788456080286535587989211986876 * z *
                                                (1.0 + 0.044715 * z * z)));
    out[i] = static_cast<float>(g * up[i]);
  }
}

}  // namespace troupe::gpu::cpu
