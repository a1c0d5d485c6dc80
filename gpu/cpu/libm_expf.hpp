// expf as this platform's libm computes it, eight at a time: the softmax of a q8_0 KV cache
// (attention_q8.hpp) calls expf per key and head, as llama.cpp's flash attention does, and one
// libm call per score was a tenth of a decode step.
//
// glibc 2.36 (Debian 12) runs its FMA variant of expf (__expf_fma, chosen by ifunc on every CPU
// with FMA and AVX2, so wherever troupe's AVX2 kernels run): in double precision,
//   z  = fma(x, N/ln2, SHIFT), ki = bits(z), kd = z - SHIFT, r = fma(N/ln2, x, -kd)   (N = 32)
//   s  = double(T[ki % 32] + (ki << 47)),  y = fma(fma(r, C0, C1), r*r, fma(r, C2, 1)) * s
// rounded to float; x < -0x1.9fe368p6 gives 0 and x < -0x1.9d1d9ep6 the smallest subnormal.
// The constants and the 32-entry table are that libm's (read from its .rodata, 2026-12-05).
// libm_expf_x8_avx2 repeats those operations in 4-wide double vectors (libm_expf_x16_avx512 in
// 8-wide ones, its table read by permutes), so they give libm's bits:
// tests/gpu/cpu_libm_expf_test.cpp compares it with expf on every float in [-104, 0] (the
// arguments the softmax passes: a score minus the running maximum, or -inf).
//
// Another libm (another glibc, musl) could round differently: libm_expf_x8_agrees() and
// libm_expf_x16_agrees() check a spread of inputs against the process's own expf once, and
// callers fall back to std::exp when a form does not agree, so the kernels keep libm's bits
// everywhere.
//
// Thread-safety: pure functions; the agreement checks compute their answers once (thread-safe
// static initialization).
#pragma once

#include <cstdint>

#include "gpu/cpu/isa_target.hpp"

namespace troupe::gpu::cpu {

#if TROUPE_X86
// expf of each lane of x, for x <= 0 (or -inf); what libm returns for those. For AVX2 code.
TROUPE_TARGET_AVX2 __m256 libm_expf_x8_avx2(__m256 x);
// The same, sixteen lanes; for AVX-512 code.
TROUPE_TARGET_AVX512 __m512 libm_expf_x16_avx512(__m512 x);
#endif

// y[i] = libm_expf_x8_avx2 of x[i] for i < n (n % 8 == 0); callable from any code on a CPU
// with AVX2 (the check and the tests use it).
void libm_expf_avx2(const float* x, float* y, int64_t n);
// The same with libm_expf_x16_avx512 (n % 16 == 0), on a CPU with AVX-512.
void libm_expf_avx512(const float* x, float* y, int64_t n);

// Whether libm_expf_x8_avx2 gives this process's expf bits (false off x86 or without AVX2).
bool libm_expf_x8_agrees();
// Whether libm_expf_x16_avx512 does (false without AVX-512 VNNI, the kernels' level).
bool libm_expf_x16_agrees();

}  // namespace troupe::gpu::cpu
