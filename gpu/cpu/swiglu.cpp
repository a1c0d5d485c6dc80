// SwiGLU kernels (see swiglu.hpp).
#include "gpu/cpu/swiglu.hpp"

#include <cmath>

#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/vec_math.hpp"

namespace troupe::gpu::cpu {
namespace {

#if TROUPE_X86
TROUPE_TARGET_AVX512 void swiglu_avx512(const float* g, const float* u, float* out, int64_t n) {
  // ggml's SiLU (ggml_v_silu): x / (1 + ggml_expf(0 - x)), then times up.
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m =
        n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 z = _mm512_maskz_loadu_ps(m, g + i);
    const __m512 e = ggml_expf512(_mm512_sub_ps(_mm512_setzero_ps(), z));
    const __m512 silu = _mm512_div_ps(z, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, u + i)));
  }
}

TROUPE_TARGET_AVX2 void swiglu_avx2(const float* g, const float* u, float* out, int64_t n) {
  // The same operations as the AVX-512 form and the scalar ggml_silu, 8 lanes at a time.
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 z = _mm256_loadu_ps(g + i);
    const __m256 e = ggml_expf256(_mm256_sub_ps(_mm256_setzero_ps(), z));
    const __m256 silu = _mm256_div_ps(z, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
  }
  if (i < n) {
    alignas(32) float zb[8] = {}, ub[8] = {}, ob[8];
    for (int64_t j = i; j < n; ++j) zb[j - i] = g[j], ub[j - i] = u[j];
    const __m256 z = _mm256_load_ps(zb);
    const __m256 e = ggml_expf256(_mm256_sub_ps(_mm256_setzero_ps(), z));
    _mm256_store_ps(ob, _mm256_mul_ps(_mm256_div_ps(z, _mm256_add_ps(one, e)), _mm256_load_ps(ub)));
    for (int64_t j = i; j < n; ++j) out[j] = ob[j - i];
  }
}
#endif

}  // namespace

void swiglu(const float* gate, const float* up, float* out, int64_t n, IsaLevel isa) {
#if TROUPE_X86
  if (isa == IsaLevel::kAvx512Vnni) return swiglu_avx512(gate, up, out, n);
  if (isa == IsaLevel::kAvx2) return swiglu_avx2(gate, up, out, n);
#endif
  (void)isa;
  for (int64_t i = 0; i < n; ++i) out[i] = ggml_silu(gate[i]) * up[i];
}

void swiglu_reference(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double z = gate[i];
    out[i] = static_cast<float>(z / (1.0 + std::exp(-z)) * up[i]);
  }
}

}  // namespace troupe::gpu::cpu
