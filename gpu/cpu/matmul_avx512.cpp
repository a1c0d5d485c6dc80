// AVX-512 VNNI tile kernels of the batched matmul (layouts in matmul_kernels.hpp, numerics in
// matmul.hpp). Up to kRows activation rows share each unpacked weight vector.
#include <cstring>

#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/matmul_kernels.hpp"

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

// Quantized formats: R rows (1..kRows) starting at row r0 against one tile.
template <PackedFormat F, int R>
TROUPE_TARGET_AVX512 void quant_tile(const TileJob& job, const uint8_t* tile, int64_t r0,
                                     int64_t o0) {
  constexpr int kBlockBytes = F == PackedFormat::kQ4_0   ? kQ4_0BlockBytes
                              : F == PackedFormat::kQ4_1 ? kQ4_1BlockBytes
                                                         : kQ8_0BlockBytes;
  constexpr int kQuantOffset = F == PackedFormat::kQ4_1 ? 64 : 32;
  // Two independent integer chains per row when few rows give the core too little to overlap.
  constexpr bool kSplit = R <= 2;
  const int64_t nb = job.num_inputs / kQuantBlock;
  const int64_t K = job.num_inputs;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = tile + b * kBlockBytes;
    const uint8_t* qs = blk + kQuantOffset;
    __m512i isum[R];
    __m512i isum2[R];
    for (int i = 0; i < R; ++i) {
      const int32_t xsum = job.xsum[(r0 + i) * nb + b];
      if constexpr (F == PackedFormat::kQ4_0) {
        isum[i] = _mm512_set1_epi32(-8 * xsum);
      } else if constexpr (F == PackedFormat::kQ8_0) {
        isum[i] = _mm512_set1_epi32(-128 * xsum);
      } else {
        isum[i] = _mm512_setzero_si512();
      }
      isum2[i] = _mm512_setzero_si512();
    }
    if constexpr (F == PackedFormat::kQ8_0) {
      for (int g = 0; g < 8; ++g) {
        const __m512i w = _mm512_loadu_si512(qs + 64 * g);
        for (int i = 0; i < R; ++i) {
          const int8_t* xb = job.xq + (r0 + i) * K + b * kQuantBlock + 4 * g;
          if (kSplit && (g & 1)) {
            isum2[i] = _mm512_dpbusd_epi32(isum2[i], w, broadcast_dword(xb));
          } else {
            isum[i] = _mm512_dpbusd_epi32(isum[i], w, broadcast_dword(xb));
          }
        }
      }
    } else {
      for (int p = 0; p < 4; ++p) {
        const __m512i v = _mm512_loadu_si512(qs + 64 * p);
        const __m512i lo = _mm512_and_si512(v, low4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        for (int i = 0; i < R; ++i) {
          const int8_t* xb = job.xq + (r0 + i) * K + b * kQuantBlock + 8 * p;
          isum[i] = _mm512_dpbusd_epi32(isum[i], lo, broadcast_dword(xb));
          if (kSplit) {
            isum2[i] = _mm512_dpbusd_epi32(isum2[i], hi, broadcast_dword(xb + 4));
          } else {
            isum[i] = _mm512_dpbusd_epi32(isum[i], hi, broadcast_dword(xb + 4));
          }
        }
      }
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    __m512 mw;
    if constexpr (F == PackedFormat::kQ4_1) {
      mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
    }
    for (int i = 0; i < R; ++i) {
      const int64_t xi = (r0 + i) * nb + b;
      const __m512i s = kSplit ? _mm512_add_epi32(isum[i], isum2[i]) : isum[i];
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(job.dx[xi]));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc[i]);
      if constexpr (F == PackedFormat::kQ4_1) {
        acc[i] = _mm512_fmadd_ps(mw, _mm512_set1_ps(job.xsx[xi]), acc[i]);
      }
    }
  }
  const int64_t valid = job.num_outputs - o0;
  for (int i = 0; i < R; ++i) store_tile(job.y + (r0 + i) * job.ldy + o0, acc[i], valid);
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

template <PackedFormat F, int R>
TROUPE_TARGET_AVX512 void one_tile(const TileJob& job, const uint8_t* tile, int64_t r0, int64_t o0) {
  if constexpr (F == PackedFormat::kQ4_0 || F == PackedFormat::kQ4_1 || F == PackedFormat::kQ8_0) {
    quant_tile<F, R>(job, tile, r0, o0);
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
