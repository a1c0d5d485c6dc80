// Internal to attention_q8*.cpp: the q8_0 cache's kernels, each scalar twin (attention_q8.cpp)
// with its AVX2 form (attention_q8_simd.cpp) and, for the heaviest, an AVX-512 one
// (attention_q8_avx512.cpp) giving the same bits, and the table the driver picks per isa.
// cpu_attention_q8_test checks every form the CPU runs against the twin.
//
//   scores          s[h][i] = dot(K row i, Q_h) * scale for n keys and each of `heads` query
//                   heads (ggml_vec_dot_q8_0_q8_0's order per pair; a key's blocks are read
//                   once for all the heads)
//   softmax         llama.cpp's online softmax over the chunk's scores, for several query rows
//                   (items) that see the same keys: each item's running maximum and sum, and per
//                   key its factors ms (the accumulator's rescale, 1 unless a new maximum) and
//                   vs (the V row's weight); rescaled[item]: whether any ms differs from 1
//   accumulate      acc = acc * ms[i] (where a new maximum) then fma(V_i, vs[i], acc), per key,
//                   for several items over the same dequantized V rows (a prompt's rows)
//   accumulate_heads  the same for several items of one generated token, straight from the q8_0
//                   V rows (each V block dequantized once for all of them)
//
// Thread-safety: pure functions over caller-owned buffers.
#pragma once

#include <cstdint>

#include "gpu/cpu/attention_q8.hpp"
#include "gpu/cpu/isa_target.hpp"

namespace troupe::gpu::cpu::detail {

inline constexpr int32_t kQ8Block = model::quants::kBlockElements;
// Keys whose scores and softmax factors are computed before the accumulators take them: the
// scores of a chunk do not depend on the running state, so their dot products and expf calls do
// not wait on each other.
inline constexpr int32_t kQ8KeyChunk = 32;
// Items (query rows x heads) that share one softmax call; a caller with more splits them.
inline constexpr int32_t kQ8MaxItems = 64;

// The next chunk's K and V rows, which a scores kernel asks towards L2 while it computes: a row
// or two of each per pair of keys keeps misses in flight through the arithmetic. The same
// requests issued in one burst by the driver (a chunk's rows, ~70 lines) stalled on the
// line-fill buffers instead (bench/attention_q8_bench, 4k context: 1.24 of the f16 cache's
// time, against 0.74 spread).
struct Q8Ahead {
  const BlockQ8_0* const* k = nullptr;
  const BlockQ8_0* const* v = nullptr;
  int32_t n = 0;
};

struct Q8Kernels {
  void (*quantize)(const float* x, BlockQ8_0& out);
  float (*dot)(const BlockQ8_0* x, const BlockQ8_0* y, int32_t blocks);
  void (*scale)(float* acc, int32_t n, float by);
  // q: heads x blocks; s: [head][kQ8KeyChunk]; ahead: rows to prefetch (may be empty).
  void (*scores)(const BlockQ8_0* const* rows, int32_t n, const BlockQ8_0* q, int32_t heads,
                 int32_t blocks, float scale, float* s, const Q8Ahead& ahead);
  void (*dequantize_rows)(const BlockQ8_0* const* rows, int32_t n, int32_t blocks, float* out);
  // states[item]: its running maximum and sum; s, ms, vs: [item][kQ8KeyChunk].
  void (*softmax)(float* const* states, int32_t items, const float* s, int32_t n, float* ms,
                  float* vs, bool* rescaled);
  // acc[item]: head_dim values; values: the chunk's n V rows as floats; ms, vs:
  // [item][kQ8KeyChunk].
  void (*accumulate)(float* const* acc, int32_t items, const float* values, int32_t n,
                     int32_t head_dim, const float* ms, const float* vs, const bool* rescaled);
  // acc[item]: head_dim values; ms, vs: [item][kQ8KeyChunk].
  void (*accumulate_heads)(float* const* acc, int32_t items, const BlockQ8_0* const* rows,
                           int32_t n, int32_t blocks, const float* ms, const float* vs,
                           const bool* rescaled);
};

#if TROUPE_X86
// Asks row i of `ahead` (K and V, `blocks` blocks each) towards L2, when there is one. Always
// inlined: GCC 12 took an out-of-line copy for a function without side effects (prefetches do
// not count) and deleted the calls, prefetches and all.
[[gnu::always_inline]] inline void prefetch_ahead(const Q8Ahead& ahead, int32_t i,
                                                  int32_t blocks) {
  if (i >= ahead.n) return;
  const auto bytes = static_cast<uintptr_t>(sizeof(BlockQ8_0)) * blocks;
  for (const BlockQ8_0* row : {ahead.k[i], ahead.v[i]}) {
    const auto at = reinterpret_cast<uintptr_t>(row);
    for (uintptr_t line = at & ~uintptr_t{63}; line < at + bytes; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T1);
    }
  }
}
#endif

// The scalar twins (the reference order), and the fastest set this isa runs: AVX2 for kAvx2,
// that with the AVX-512 scores and accumulations for kAvx512Vnni (the softmax takes libm's expf
// in vector lanes only where libm_expf_x8_agrees(), else the twin's).
const Q8Kernels& q8_scalar_kernels();
const Q8Kernels& q8_kernels(IsaLevel isa);

// The AVX2 set (attention_q8_simd.cpp) and the AVX-512 one (attention_q8_avx512.cpp); on a
// non-x86 build, the scalar set.
Q8Kernels q8_avx2_kernels(bool vector_expf);
Q8Kernels q8_avx512_kernels(bool vector_expf);

}  // namespace troupe::gpu::cpu::detail
