// Internal to the SIMD matmul files (matmul_avx2.cpp, matmul_avx512.cpp): the tile driver and
// the format dispatch that every ISA shares, and the small vector helpers (broadcast, fold,
// partial store) of each ISA. The kernels themselves stay in their ISA's file: their operation
// order is what makes every path bit-identical.
//
// ODR (isa_target.hpp): the vector helpers live in an ISA namespace (avx2::, avx512::) and carry
// that ISA's target attribute, so every TU that includes this header compiles the same body for
// the same target. The driver templates hold no vector code and no target attribute; each TU
// instantiates them with its own kernel types from its anonymous namespace, so no instantiation
// is shared between TUs compiled for different ISAs.
//
// Thread-safety: pure functions; callable from any thread (on a CPU with the ISA).
#pragma once

#include <algorithm>
#include <cstdint>

#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/matmul_kernels.hpp"
#include "gpu/cpu/vec_math.hpp"

namespace troupe::gpu::cpu::detail {

// The lines of the next tile one kernel call asks for into L2 (an AheadPlan pass), per_block of
// them per 32 inputs (ask_ahead). Kernels take it by reference: passed by value, the struct was
// copied with a 16-byte load of the caller's two fresh 8-byte stores, a failed store forward on
// every call (batch 64 fell from 770-845 to 555-713 tok/s, perf on that load; 2026-12-06).
struct AheadLines {
  const char* next = nullptr;
  const char* end = nullptr;
  int64_t per_block = 0;
};

// In a kernel's loop, once per block of 32 inputs: asks for the next per_block lines of `lines`
// into L2 (prefetcht1), `next` being the kernel's cursor, from lines.next.
inline void ask_ahead(const char*& next, const AheadLines& lines) {
  for (int64_t i = 0; i < lines.per_block && next < lines.end; ++i, next += 64) {
    __builtin_prefetch(next, 0, 2);
  }
}

// How a tile's row passes ask for the next tile's lines into L2 while they compute (the weights
// stream from memory once per call; matmul_avx512.cpp's run_quant_tiles has the measurements):
// pass p of `passes` asks for `share` lines, one more when p < extra, per_block of them per block
// of its loop, so that only a few requests are in flight at once. Fixed per call: no division per
// pass.
struct AheadPlan {
  int64_t share = 0, extra = 0, per_block = 0;

  AheadPlan(const TileJob& job, int64_t passes) {
    const auto lines = static_cast<int64_t>((job.tile_bytes + 63) / 64);
    // Float K: any width. No rows or no inputs leave nothing to run (and nothing to divide by).
    const int64_t blocks = std::max<int64_t>(1, (job.num_inputs + kQuantBlock - 1) / kQuantBlock);
    passes = std::max<int64_t>(1, passes);
    share = lines / passes;
    extra = lines % passes;
    per_block = (share + (extra > 0 ? 1 : 0) + blocks - 1) / blocks;
  }
  // Pass p's lines, from `next` (left past them); none on the last tile of a call's range
  // (what follows it is another thread's, or nothing).
  AheadLines take(const char*& next, int64_t p, bool last_tile) const;
};

inline AheadLines AheadPlan::take(const char*& next, int64_t p, bool last_tile) const {
  const char* end = next + 64 * (share + (p < extra ? 1 : 0));
  const AheadLines lines = last_tile ? AheadLines{} : AheadLines{next, end, per_block};
  next = end;
  return lines;
}

// The last `job.num_rows - r` rows (fewer than R + 1) of a tile part as one group whose size is
// a compile-time constant (the kernels keep one accumulator set per row in registers).
template <class Kernel, int R>
void run_row_remainder(const TileJob& job, const uint8_t* tile, int part, int64_t r, int64_t o0,
                       const AheadLines& ahead) {
  if constexpr (R > 0) {
    if (job.num_rows - r == R) {
      Kernel::template rows<R>(job, tile, part, r, o0, ahead);
      return;
    }
    run_row_remainder<Kernel, R - 1>(job, tile, part, r, o0, ahead);
  }
}

// Tiles [tile_begin, tile_end) through Kernel::rows<R>(job, tile, part, r0, o0, ahead): each
// tile as kParts parts of kTileOutputs / kParts output lanes (AVX2 takes a 16-lane tile in two
// 8-lane halves), rows in groups of kMaxRows sharing each weight load, then one group of the
// rest; each call asks for its share of the next tile (AheadPlan). Every (row, output) is
// computed by the same operations whatever its group (matmul.hpp), so the grouping is only a
// matter of speed.
template <class Kernel, int kParts, int kMaxRows>
void run_tiles(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
  constexpr int kPartLanes = kTileOutputs / kParts;
  const int64_t groups = (job.num_rows + kMaxRows - 1) / kMaxRows;
  const AheadPlan plan(job, kParts * groups);
  for (int64_t t = tile_begin; t < tile_end; ++t) {
    const auto* tile = reinterpret_cast<const uint8_t*>(job.tiles + t * job.tile_bytes);
    const int64_t o0 = t * kTileOutputs;
    const bool last_tile = t + 1 == tile_end;
    const char* next = reinterpret_cast<const char*>(tile + job.tile_bytes);
    int64_t pass = 0;
    for (int part = 0; part < kParts && o0 + kPartLanes * part < job.num_outputs; ++part) {
      for (int64_t r = 0; r < job.num_rows; r += kMaxRows) {
        const AheadLines ahead = plan.take(next, pass++, last_tile);
        if (r + kMaxRows <= job.num_rows) {
          Kernel::template rows<kMaxRows>(job, tile, part, r, o0, ahead);
        } else {
          run_row_remainder<Kernel, kMaxRows - 1>(job, tile, part, r, o0, ahead);
        }
      }
    }
  }
}

// Runner::run<F>(job, tile_begin, tile_end) for the job's packed format: one instantiation per
// format, so each kernel is compiled with its format's constants.
template <class Runner>
void dispatch_format(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
  switch (job.format) {
    case PackedFormat::kQ4_0: Runner::template run<PackedFormat::kQ4_0>(job, tile_begin, tile_end); return;
    case PackedFormat::kQ4_1: Runner::template run<PackedFormat::kQ4_1>(job, tile_begin, tile_end); return;
    case PackedFormat::kQ8_0: Runner::template run<PackedFormat::kQ8_0>(job, tile_begin, tile_end); return;
    case PackedFormat::kQ5_1: Runner::template run<PackedFormat::kQ5_1>(job, tile_begin, tile_end); return;
    case PackedFormat::kKQuantRows: return;  // not tiled: matmul_tiles routes it (matmul_q8k.hpp)
    case PackedFormat::kF32: Runner::template run<PackedFormat::kF32>(job, tile_begin, tile_end); return;
    case PackedFormat::kF16: Runner::template run<PackedFormat::kF16>(job, tile_begin, tile_end); return;
    case PackedFormat::kBF16: Runner::template run<PackedFormat::kBF16>(job, tile_begin, tile_end); return;
  }
}

#if TROUPE_X86

namespace avx2 {

// Four int8 activations as one dword in every 32-bit lane.
TROUPE_TARGET_AVX2 inline __m256i broadcast_dword(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// ggml's hsum_float_8 order over the eight group accumulators, lane by lane:
// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
TROUPE_TARGET_AVX2 inline __m256 fold_groups(const __m256 (&a)[8]) {
  const __m256 v0 = _mm256_add_ps(a[0], a[4]), v1 = _mm256_add_ps(a[1], a[5]);
  const __m256 v2 = _mm256_add_ps(a[2], a[6]), v3 = _mm256_add_ps(a[3], a[7]);
  return _mm256_add_ps(_mm256_add_ps(v0, v2), _mm256_add_ps(v1, v3));
}

// Activation quantization's last step for one block, shared by the AVX2 and AVX-512 forms: its
// eight 4-code group sums stored as QuantizeJob's group biases (-128 x the sum: what Q8_0's
// +128 code offset adds back in the products); returns the block's code sum.
TROUPE_TARGET_AVX2 inline int32_t store_group_sums(int32_t* group_bias, __m256i groups) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(group_bias),
                      _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(groups, 7)));
  return hsum_epi32_avx2(groups);
}

// The first `valid` of 8 lanes (a tile's last outputs may be padding).
TROUPE_TARGET_AVX2 inline void store_lanes(float* y, __m256 v, int64_t valid) {
  if (valid >= 8) {
    _mm256_storeu_ps(y, v);
  } else if (valid > 0) {
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, v);
    for (int64_t i = 0; i < valid; ++i) y[i] = tmp[i];
  }
}

}  // namespace avx2

namespace avx512 {

TROUPE_TARGET_AVX512 inline __m512i broadcast_dword(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// As avx2::fold_groups, 16 lanes.
TROUPE_TARGET_AVX512 inline __m512 fold_groups(const __m512 (&a)[8]) {
  const __m512 v0 = _mm512_add_ps(a[0], a[4]), v1 = _mm512_add_ps(a[1], a[5]);
  const __m512 v2 = _mm512_add_ps(a[2], a[6]), v3 = _mm512_add_ps(a[3], a[7]);
  return _mm512_add_ps(_mm512_add_ps(v0, v2), _mm512_add_ps(v1, v3));
}

TROUPE_TARGET_AVX512 inline void store_lanes(float* y, __m512 v, int64_t valid) {
  if (valid >= 16) {
    _mm512_storeu_ps(y, v);
  } else {
    _mm512_mask_storeu_ps(y, static_cast<__mmask16>((1u << valid) - 1u), v);
  }
}

}  // namespace avx512

#endif  // TROUPE_X86

}  // namespace troupe::gpu::cpu::detail
