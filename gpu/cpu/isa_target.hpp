// Per-function ISA targets for kernels compiled into an otherwise baseline x86-64 binary.
//
// Kernels use function attributes rather than per-file -m flags: an inline function from a
// shared header (std::vector, a helper) instantiated in a -mavx512f file could be picked by the
// linker for every caller and fault on a CPU without AVX-512. Functions marked with these macros
// take raw pointers and call only intrinsics and other functions of the same target.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#define TROUPE_X86 1
#include <immintrin.h>
// GCC 12's AVX-512 reduce/cvt intrinsics start from _mm512_undefined_*(), which its flow
// analysis reports as uninitialized use; the warnings are false positives.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#define TROUPE_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TROUPE_TARGET_AVX512 \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
// AVX-512 plus BF16 (vdpbf16ps): Cooper Lake, Sapphire Rapids, Zen 4+.
#define TROUPE_TARGET_AVX512_BF16                                                          \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni," \
                        "avx512bf16")))
// AMX tiles with bf16 products (tdpbf16ps): Sapphire Rapids and later.
#define TROUPE_TARGET_AMX __attribute__((target("amx-tile,amx-bf16")))
#else
#define TROUPE_X86 0
#define TROUPE_TARGET_AVX2
#define TROUPE_TARGET_AVX512
#define TROUPE_TARGET_AVX512_BF16
#define TROUPE_TARGET_AMX
#endif
