// Vectorized exp for the AVX-512 kernels (softmax, SiLU).
//
// Cody-Waite range reduction and a degree-6 polynomial: relative error below 2 ulp over the
// range softmax and SiLU use; inputs below -87.3 give 0, above 88.7 give +inf. Every row goes
// through the same code, so results stay batch-invariant.
#pragma once

#include "gpu/cpu/isa_target.hpp"

namespace troupe::gpu::cpu {

#if TROUPE_X86
TROUPE_TARGET_AVX512 inline __m512 exp512(__m512 x) {
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693359375f);
  const __m512 ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
  x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
  r = _mm512_fnmadd_ps(n, ln2_lo, r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  // scalef computes p * 2^n and handles the exponent range (overflow to inf, underflow to 0).
  return _mm512_scalef_ps(p, n);
}

TROUPE_TARGET_AVX512 inline float reduce_add512(__m512 v) { return _mm512_reduce_add_ps(v); }
#endif

}  // namespace troupe::gpu::cpu
