// AVX-512 VNNI tile kernels of the batched matmul (layouts in matmul_kernels.hpp, numerics in
// matmul.hpp). Up to kRows activation rows share each unpacked weight vector.
#include <cstring>

#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/matmul_kernels.hpp"
#include "gpu/cpu/matmul_kquant.hpp"

namespace troupe::gpu::cpu::detail {

#if TROUPE_X86
namespace {

constexpr int kRows = 8;

TROUPE_TARGET_AVX512 inline __m512i broadcast_dword(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

TROUPE_TARGET_AVX512 inline void store_tile(float* y, __m512 v, int64_t valid) {
  if (valid >= 16) {
    _mm512_storeu_ps(y, v);
  } else {
    _mm512_mask_storeu_ps(y, static_cast<__mmask16>((1u << valid) - 1u), v);
  }
}

// The integer dot of one 4-input group of 16 outputs, minus the format's offset (exact), as
// float. bias: the group's -128 * (sum of its 4 activations) (QuantizedRows::group_bias).
template <int32_t kOffset>
TROUPE_TARGET_AVX512 inline __m512 group_dot(__m512i w, const int8_t* xb, const int32_t* bias) {
  __m512i init;
  if constexpr (kOffset == 0) {
    init = _mm512_setzero_si512();
  } else if constexpr (kOffset == 128) {
    init = _mm512_set1_epi32(*bias);
  } else {
    static_assert(kOffset == 8);
    init = _mm512_srai_epi32(_mm512_set1_epi32(*bias), 4);
  }
  return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(init, w, broadcast_dword(xb)));
}

// Quantized formats: R rows (1..kQuantRows) starting at row r0 against one tile, in ggml's
// order (matmul.hpp): eight float accumulators per (row, output), one per 4-input group of a
// block, combined at the end as ggml's hsum_float_8; Q4_1's m * s terms in their own chain.
template <PackedFormat F, int R>
TROUPE_TARGET_AVX512 void quant_tile(const TileJob& job, const uint8_t* tile, int64_t r0,
                                     int64_t o0) {
  constexpr int kBlockBytes = packed_block_bytes(F);
  constexpr bool kHasMin = F == PackedFormat::kQ4_1 || F == PackedFormat::kQ5_1;
  constexpr int kQuantOffset = kHasMin ? 64 : 32;
  const int64_t nb = job.num_inputs / kQuantBlock;
  const int64_t K = job.num_inputs;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[R][8];
  __m512 macc[R];
  for (int i = 0; i < R; ++i) {
    for (auto& a : acc[i]) a = _mm512_setzero_ps();
    macc[i] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = tile + b * kBlockBytes;
    const uint8_t* qs = blk + kQuantOffset;
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    __m512 scale[R];
    for (int i = 0; i < R; ++i) scale[i] = _mm512_mul_ps(dw, _mm512_set1_ps(job.dx[(r0 + i) * nb + b]));
    if constexpr (F == PackedFormat::kQ8_0 || F == PackedFormat::kQ5_1) {
      // Byte codes: Q8_0 stored +128 (bias), Q5_1 unsigned as they are.
      constexpr int32_t kOffset = F == PackedFormat::kQ8_0 ? 128 : 0;
      for (int g = 0; g < 8; ++g) {
        const __m512i w = _mm512_loadu_si512(qs + 64 * g);
        for (int i = 0; i < R; ++i) {
          const int8_t* xb = job.xq + (r0 + i) * K + b * kQuantBlock + 4 * g;
          const int32_t* bias = job.xgb + ((r0 + i) * nb + b) * 8 + g;
          acc[i][g] = _mm512_fmadd_ps(scale[i], group_dot<kOffset>(w, xb, bias), acc[i][g]);
        }
      }
    } else {
      constexpr int32_t kOffset = F == PackedFormat::kQ4_0 ? 8 : 0;
      for (int p = 0; p < 4; ++p) {
        const __m512i v = _mm512_loadu_si512(qs + 64 * p);
        const __m512i lo = _mm512_and_si512(v, low4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        for (int i = 0; i < R; ++i) {
          const int8_t* xb = job.xq + (r0 + i) * K + b * kQuantBlock + 8 * p;
          const int32_t* bias = job.xgb + ((r0 + i) * nb + b) * 8 + 2 * p;
          acc[i][2 * p] = _mm512_fmadd_ps(scale[i], group_dot<kOffset>(lo, xb, bias), acc[i][2 * p]);
          acc[i][2 * p + 1] = _mm512_fmadd_ps(scale[i], group_dot<kOffset>(hi, xb + 4, bias + 1), acc[i][2 * p + 1]);
        }
      }
    }
    if constexpr (kHasMin) {
      const __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
      for (int i = 0; i < R; ++i) {
        macc[i] = _mm512_fmadd_ps(mw, _mm512_set1_ps(job.xsx[(r0 + i) * nb + b]), macc[i]);
      }
    }
  }
  const int64_t valid = job.num_outputs - o0;
  for (int i = 0; i < R; ++i) {
    const __m512 v0 = _mm512_add_ps(acc[i][0], acc[i][4]), v1 = _mm512_add_ps(acc[i][1], acc[i][5]);
    const __m512 v2 = _mm512_add_ps(acc[i][2], acc[i][6]), v3 = _mm512_add_ps(acc[i][3], acc[i][7]);
    __m512 y = _mm512_add_ps(_mm512_add_ps(v0, v2), _mm512_add_ps(v1, v3));
    if constexpr (kHasMin) y = _mm512_add_ps(y, macc[i]);
    store_tile(job.y + (r0 + i) * job.ldy + o0, y, valid);
  }
}

template <PackedFormat F>
TROUPE_TARGET_AVX512 inline __m512 load_float_lanes(const uint8_t* p) {
  if constexpr (F == PackedFormat::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (F == PackedFormat::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
}

template <PackedFormat F, int R>
TROUPE_TARGET_AVX512 void float_tile(const TileJob& job, const uint8_t* tile, int64_t r0,
                                     int64_t o0) {
  constexpr int kStride = F == PackedFormat::kF32 ? 64 : 32;
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t k = 0; k < job.num_inputs; ++k) {
    const __m512 w = load_float_lanes<F>(tile + k * kStride);
    for (int i = 0; i < R; ++i) {
      acc[i] = _mm512_fmadd_ps(w, _mm512_set1_ps(job.x[(r0 + i) * job.ldx + k]), acc[i]);
    }
  }
  const int64_t valid = job.num_outputs - o0;
  for (int i = 0; i < R; ++i) store_tile(job.y + (r0 + i) * job.ldy + o0, acc[i], valid);
}

template <PackedFormat F>
inline constexpr bool kQuantized = F == PackedFormat::kQ4_0 || F == PackedFormat::kQ4_1 ||
                                   F == PackedFormat::kQ8_0 || F == PackedFormat::kQ5_1;

template <PackedFormat F, int R>
TROUPE_TARGET_AVX512 void one_tile(const TileJob& job, const uint8_t* tile, int64_t r0, int64_t o0) {
  if constexpr (kQuantized<F>) {
    if constexpr (R <= 2) quant_tile<F, R>(job, tile, r0, o0);
  } else {
    float_tile<F, R>(job, tile, r0, o0);
  }
}

template <PackedFormat F>
TROUPE_TARGET_AVX512 void run(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
  for (int64_t t = tile_begin; t < tile_end; ++t) {
    const auto* tile = reinterpret_cast<const uint8_t*>(job.tiles + t * job.tile_bytes);
    const int64_t o0 = t * kTileOutputs;
    int64_t r = 0;
    if constexpr (kQuantized<F>) {
      // Eight accumulators per row: two rows fill the register file.
      for (; r + 2 <= job.num_rows; r += 2) one_tile<F, 2>(job, tile, r, o0);
    }
    for (; r + kRows <= job.num_rows; r += kRows) one_tile<F, kRows>(job, tile, r, o0);
    switch (job.num_rows - r) {
      case 0: break;
      case 1: one_tile<F, 1>(job, tile, r, o0); break;
      case 2: one_tile<F, 2>(job, tile, r, o0); break;
      case 3: one_tile<F, 3>(job, tile, r, o0); break;
      case 4: one_tile<F, 4>(job, tile, r, o0); break;
      case 5: one_tile<F, 5>(job, tile, r, o0); break;
      case 6: one_tile<F, 6>(job, tile, r, o0); break;
      case 7: one_tile<F, 7>(job, tile, r, o0); break;
    }
  }
}

}  // namespace

void matmul_tiles_avx512(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
  switch (job.format) {
    case PackedFormat::kQ4_0: run<PackedFormat::kQ4_0>(job, tile_begin, tile_end); return;
    case PackedFormat::kQ4_1: run<PackedFormat::kQ4_1>(job, tile_begin, tile_end); return;
    case PackedFormat::kQ8_0: run<PackedFormat::kQ8_0>(job, tile_begin, tile_end); return;
    case PackedFormat::kQ5_1: run<PackedFormat::kQ5_1>(job, tile_begin, tile_end); return;
    case PackedFormat::kQ4_K:
    case PackedFormat::kQ5_K:
    case PackedFormat::kQ6_K: matmul_ktiles_avx512(job, tile_begin, tile_end); return;
    case PackedFormat::kF32: run<PackedFormat::kF32>(job, tile_begin, tile_end); return;
    case PackedFormat::kF16: run<PackedFormat::kF16>(job, tile_begin, tile_end); return;
    case PackedFormat::kBF16: run<PackedFormat::kBF16>(job, tile_begin, tile_end); return;
  }
}

#else
void matmul_tiles_avx512(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
  matmul_tiles_scalar(job, tile_begin, tile_end);
}
#endif

}  // namespace troupe::gpu::cpu::detail
