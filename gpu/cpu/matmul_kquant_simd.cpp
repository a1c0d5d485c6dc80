// AVX-512 VNNI and AVX2 tile kernels for K-quant weights (layout and numerics in
// matmul_kquant.hpp). Each lane runs the scalar path's exact sequence of fmas and integer dots,
// so both are bit-identical to matmul_ktiles_scalar whatever the number of rows per pass.
#include <cstring>

#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/matmul_kquant.hpp"
#include "gpu/cpu/matmul_simd.hpp"

namespace troupe::gpu::cpu::detail {

#if TROUPE_X86
namespace {

// The Q6_K offset: -32 * (sum of the group's 4 activations) = group_bias >> 2 (exact: the bias
// is -128 * sum).
TROUPE_TARGET_AVX512 inline __m512i group_init512(bool q6, const int32_t* bias) {
  return q6 ? _mm512_srai_epi32(_mm512_set1_epi32(*bias), 2) : _mm512_setzero_si512();
}

// R rows (1 or 2: eight accumulators per row) against one tile.
template <PackedFormat F, int R>
TROUPE_TARGET_AVX512 void ktile512(const TileJob& job, const uint8_t* tile, int64_t r0, int64_t o0) {
  constexpr bool kQ6 = F == PackedFormat::kQ6_K;
  constexpr int kBlockBytes = F == PackedFormat::kQ4_K ? kQ4_KBlockBytes : kQ5_KBlockBytes;
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
    const uint8_t* qs = blk + kKHeaderBytes;
    const __m512 w0 = _mm512_loadu_ps(reinterpret_cast<const float*>(blk));
    const __m512 w1 = _mm512_loadu_ps(reinterpret_cast<const float*>(blk + 64));
    __m512 s_lo[R], s_hi[R];
    for (int i = 0; i < R; ++i) {
      const __m512 dx = _mm512_set1_ps(job.dx[(r0 + i) * nb + b]);
      s_lo[i] = _mm512_mul_ps(w0, dx);
      s_hi[i] = kQ6 ? _mm512_mul_ps(w1, dx) : s_lo[i];
    }
    for (int g = 0; g < 8; ++g) {
      __m512i w;
      if constexpr (F == PackedFormat::kQ4_K) {
        const __m512i v = _mm512_loadu_si512(qs + 64 * (g / 2));
        w = g % 2 == 0 ? _mm512_and_si512(v, low4) : _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      } else {
        w = _mm512_loadu_si512(qs + 64 * g);
      }
      for (int i = 0; i < R; ++i) {
        const int8_t* xb = job.xq + (r0 + i) * K + b * kQuantBlock + 4 * g;
        const int32_t* bias = job.xgb + ((r0 + i) * nb + b) * 8 + g;
        const __m512 dot = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(group_init512(kQ6, bias), w, avx512::broadcast_dword(xb)));
        acc[i][g] = _mm512_fmadd_ps(g < 4 ? s_lo[i] : s_hi[i], dot, acc[i][g]);
      }
    }
    if constexpr (!kQ6) {
      for (int i = 0; i < R; ++i) {
        const int64_t rb = (r0 + i) * nb + b;
        const float sx = job.dx[rb] * static_cast<float>(job.xsum[rb]);
        macc[i] = _mm512_fmadd_ps(w1, _mm512_set1_ps(sx), macc[i]);
      }
    }
  }
  const int64_t valid = job.num_outputs - o0;
  for (int i = 0; i < R; ++i) {
    __m512 y = avx512::fold_groups(acc[i]);
    if constexpr (!kQ6) y = _mm512_add_ps(y, macc[i]);
    avx512::store_lanes(job.y + (r0 + i) * job.ldy + o0, y, valid);
  }
}

// One row, one 8-lane half h of a tile. maddubs cannot saturate: codes <= 63, |x| <= 127,
// 2 * 63 * 127 < 32767.
template <PackedFormat F>
TROUPE_TARGET_AVX2 void khalf256(const TileJob& job, const uint8_t* tile, int h, int64_t r, int64_t o0) {
  constexpr bool kQ6 = F == PackedFormat::kQ6_K;
  constexpr int kBlockBytes = F == PackedFormat::kQ4_K ? kQ4_KBlockBytes : kQ5_KBlockBytes;
  const int64_t nb = job.num_inputs / kQuantBlock;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  __m256 macc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = tile + b * kBlockBytes;
    const uint8_t* qs = blk + kKHeaderBytes + 32 * h;
    const int64_t rb = r * nb + b;
    const int8_t* xb = job.xq + r * job.num_inputs + b * kQuantBlock;
    const __m256 w0 = _mm256_loadu_ps(reinterpret_cast<const float*>(blk + 32 * h));
    const __m256 w1 = _mm256_loadu_ps(reinterpret_cast<const float*>(blk + 64 + 32 * h));
    const __m256 dx = _mm256_set1_ps(job.dx[rb]);
    const __m256 s_lo = _mm256_mul_ps(w0, dx);
    const __m256 s_hi = kQ6 ? _mm256_mul_ps(w1, dx) : s_lo;
    for (int g = 0; g < 8; ++g) {
      __m256i w;
      if constexpr (F == PackedFormat::kQ4_K) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64 * (g / 2)));
        w = g % 2 == 0 ? _mm256_and_si256(v, low4) : _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
      } else {
        w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64 * g));
      }
      __m256i isum = _mm256_madd_epi16(_mm256_maddubs_epi16(w, avx2::broadcast_dword(xb + 4 * g)), ones16);
      if constexpr (kQ6) isum = _mm256_add_epi32(isum, _mm256_set1_epi32(job.xgb[rb * 8 + g] >> 2));
      acc[g] = _mm256_fmadd_ps(g < 4 ? s_lo : s_hi, _mm256_cvtepi32_ps(isum), acc[g]);
    }
    if constexpr (!kQ6) {
      macc = _mm256_fmadd_ps(w1, _mm256_set1_ps(job.dx[rb] * static_cast<float>(job.xsum[rb])), macc);
    }
  }
  __m256 y = avx2::fold_groups(acc);
  if constexpr (!kQ6) y = _mm256_add_ps(y, macc);
  avx2::store_lanes(job.y + r * job.ldy + o0 + 8 * h, y, job.num_outputs - o0 - 8 * h);
}

// run_tiles' kernels: AVX-512 takes whole tiles, rows in pairs (eight accumulators per row);
// AVX2 takes 8-lane halves, one row at a time.
template <PackedFormat F>
struct KTileKernel512 {
  template <int R>
  TROUPE_TARGET_AVX512 static void rows(const TileJob& job, const uint8_t* tile, int /*part*/,
                                        int64_t r0, int64_t o0) {
    ktile512<F, R>(job, tile, r0, o0);
  }
};
template <PackedFormat F>
struct KHalfKernel256 {
  template <int R>
  TROUPE_TARGET_AVX2 static void rows(const TileJob& job, const uint8_t* tile, int part,
                                      int64_t r0, int64_t o0) {
    static_assert(R == 1);
    khalf256<F>(job, tile, part, r0, o0);
  }
};

// K formats only; matmul_tiles_avx512/avx2 send nothing else here.
template <template <PackedFormat> class Kernel, int kParts, int kMaxRows>
struct KRunner {
  template <PackedFormat F>
  static void run(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
    if constexpr (is_kquant_format(F)) {
      run_tiles<Kernel<F>, kParts, kMaxRows>(job, tile_begin, tile_end);
    } else {
      matmul_ktiles_scalar(job, tile_begin, tile_end);  // matmul_tiles_* send only K formats
    }
  }
};

}  // namespace

void matmul_ktiles_avx512(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
  dispatch_format<KRunner<KTileKernel512, 1, 2>>(job, tile_begin, tile_end);
}

void matmul_ktiles_avx2(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
  dispatch_format<KRunner<KHalfKernel256, 2, 1>>(job, tile_begin, tile_end);
}

#else
void matmul_ktiles_avx512(const TileJob& job, int64_t b, int64_t e) { matmul_ktiles_scalar(job, b, e); }
void matmul_ktiles_avx2(const TileJob& job, int64_t b, int64_t e) { matmul_ktiles_scalar(job, b, e); }
#endif

}  // namespace troupe::gpu::cpu::detail
