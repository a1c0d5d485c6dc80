// AVX-512 VNNI tile kernels of the batched matmul (layouts in matmul_kernels.hpp, numerics in
// matmul.hpp). Up to two rows (quantized) or eight (float) share each unpacked weight vector.
#include <cstring>

#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/matmul_kernels.hpp"
#include "gpu/cpu/matmul_simd.hpp"

namespace troupe::gpu::cpu::detail {

#if TROUPE_X86
namespace {

using avx512::broadcast_dword;

constexpr int kFloatRows = 8;  // float formats: rows sharing each weight load

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

// Quantized formats: R rows (1 or 2) starting at row r0 against one tile, in ggml's
// order (matmul.hpp): eight float accumulators per (row, output), one per 4-input group of a
// block, combined at the end as ggml's hsum_float_8; Q4_1's m * s terms in their own chain.
template <PackedFormat F, int R>
TROUPE_TARGET_AVX512 void quant_tile(const TileJob& job, const uint8_t* tile, int64_t r0,
                                     int64_t o0) {
  constexpr int kBlockBytes = packed_block_bytes(F);
  constexpr bool kHasMin = has_packed_min(F);
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
    const uint8_t* qs = blk + packed_header_bytes(kHasMin);
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
      const __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kPackedMins)));
      for (int i = 0; i < R; ++i) {
        macc[i] = _mm512_fmadd_ps(mw, _mm512_set1_ps(job.xsx[(r0 + i) * nb + b]), macc[i]);
      }
    }
  }
  const int64_t valid = job.num_outputs - o0;
  for (int i = 0; i < R; ++i) {
    __m512 y = avx512::fold_groups(acc[i]);
    if constexpr (kHasMin) y = _mm512_add_ps(y, macc[i]);
    avx512::store_lanes(job.y + (r0 + i) * job.ldy + o0, y, valid);
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
  constexpr int kStride = packed_block_bytes(F);
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t k = 0; k < job.num_inputs; ++k) {
    const __m512 w = load_float_lanes<F>(tile + k * kStride);
    for (int i = 0; i < R; ++i) {
      acc[i] = _mm512_fmadd_ps(w, _mm512_set1_ps(job.x[(r0 + i) * job.ldx + k]), acc[i]);
    }
  }
  const int64_t valid = job.num_outputs - o0;
  for (int i = 0; i < R; ++i) avx512::store_lanes(job.y + (r0 + i) * job.ldy + o0, acc[i], valid);
}

// run_tiles' kernel: a whole 16-lane tile (one part) for R rows.
template <PackedFormat F>
struct TileKernel {
  template <int R>
  TROUPE_TARGET_AVX512 static void rows(const TileJob& job, const uint8_t* tile, int /*part*/,
                                        int64_t r0, int64_t o0) {
    if constexpr (is_legacy_format(F)) {
      quant_tile<F, R>(job, tile, r0, o0);
    } else {
      float_tile<F, R>(job, tile, r0, o0);
    }
  }
};

struct Avx512Runner {
  template <PackedFormat F>
  static void run(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
    if constexpr (is_legacy_format(F)) {
      // Eight accumulators per row: two rows fill the register file.
      run_tiles<TileKernel<F>, 1, 2>(job, tile_begin, tile_end);
    } else {
      run_tiles<TileKernel<F>, 1, kFloatRows>(job, tile_begin, tile_end);
    }
  }
};

}  // namespace

void matmul_tiles_avx512(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
  dispatch_format<Avx512Runner>(job, tile_begin, tile_end);
}

#else
void matmul_tiles_avx512(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
  matmul_tiles_scalar(job, tile_begin, tile_end);
}
#endif

}  // namespace troupe::gpu::cpu::detail
