// AVX2 tile kernels of the batched matmul (layouts in matmul_kernels.hpp, numerics in
// matmul.hpp). A 16-output tile is done as two 8-lane halves; int8 products use
// vpmaddubsw + vpmaddwd, whose 16-bit intermediates cannot saturate for these ranges
// (Q4: 15 * 127 * 2; Q8 via the sign trick: 128 * 127 * 2 < 32767).
#include <algorithm>
#include <cstring>

#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/matmul_kernels.hpp"
#include "gpu/cpu/matmul_simd.hpp"

namespace troupe::gpu::cpu::detail {

#if TROUPE_X86
namespace {

using avx2::broadcast_dword;

constexpr int kFloatRows = 4;  // float formats: rows sharing each weight load

// Quantized formats, R rows sharing each weight load, over groups [kFirstGroup, kFirstGroup +
// kNumGroups) of every block: ggml's order (matmul.hpp), one float accumulator per (row,
// 4-input group) fed its blocks in order. One row takes all eight groups in one pass; more rows
// take two passes of four (sixteen ymm registers hold no more), which leaves every accumulator's
// sequence, and so every bit, unchanged. Q4_1/Q5_1's m * s chain runs in the pass that ends the
// block. `ahead`: lines of the next tile to ask for as it goes (AheadPlan).
template <PackedFormat F, int R, int kFirstGroup, int kNumGroups>
TROUPE_TARGET_AVX2 inline void quant_half_pass(const TileJob& job, const uint8_t* tile, int h,
                                               int64_t r0, __m256 (&lanes)[R][8],
                                               __m256 (&macc)[R], const AheadLines& ahead) {
  constexpr int kBlockBytes = packed_block_bytes(F);
  constexpr bool kHasMin = has_packed_min(F);
  const int64_t nb = job.num_inputs / kQuantBlock;
  const int64_t K = job.num_inputs;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256 acc[R][kNumGroups];
  for (auto& a : acc) {
    for (auto& v : a) v = _mm256_setzero_ps();
  }
  const char* next = ahead.next;
  for (int64_t b = 0; b < nb; ++b) {
    ask_ahead(next, ahead);
    const uint8_t* blk = tile + b * kBlockBytes;
    const uint8_t* qs = blk + packed_header_bytes(kHasMin) + 32 * h;
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
    __m256 scale[R];
    for (int i = 0; i < R; ++i) scale[i] = _mm256_mul_ps(dw, _mm256_set1_ps(job.dx[(r0 + i) * nb + b]));
    if constexpr (F == PackedFormat::kQ8_0) {
      for (int gg = 0; gg < kNumGroups; ++gg) {
        const int g = kFirstGroup + gg;
        const __m256i sw = _mm256_xor_si256(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64 * g)), flip);
        const __m256i aw = _mm256_abs_epi8(sw);
        for (int i = 0; i < R; ++i) {
          const __m256i x = broadcast_dword(job.xq + (r0 + i) * K + b * kQuantBlock + 4 * g);
          const __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, sw));
          acc[i][gg] = _mm256_fmadd_ps(scale[i], _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones16)), acc[i][gg]);
        }
      }
    } else if constexpr (F == PackedFormat::kQ5_1) {
      // Unsigned codes <= 31: maddubs cannot saturate (2 * 31 * 127 < 32767).
      for (int gg = 0; gg < kNumGroups; ++gg) {
        const int g = kFirstGroup + gg;
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64 * g));
        for (int i = 0; i < R; ++i) {
          const __m256i x = broadcast_dword(job.xq + (r0 + i) * K + b * kQuantBlock + 4 * g);
          const __m256i p16 = _mm256_maddubs_epi16(w, x);
          acc[i][gg] = _mm256_fmadd_ps(scale[i], _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones16)), acc[i][gg]);
        }
      }
    } else {
      for (int pp = 0; pp < kNumGroups / 2; ++pp) {  // 64-byte chunk p: groups 2p (low), 2p + 1
        const int p = kFirstGroup / 2 + pp;
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64 * p));
        const __m256i lo = _mm256_and_si256(v, low4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        for (int i = 0; i < R; ++i) {
          const int8_t* xb = job.xq + (r0 + i) * K + b * kQuantBlock + 8 * p;
          __m256i ilo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, broadcast_dword(xb)), ones16);
          __m256i ihi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, broadcast_dword(xb + 4)), ones16);
          if constexpr (F == PackedFormat::kQ4_0) {
            ilo = _mm256_sub_epi32(ilo, _mm256_set1_epi32(8 * (xb[0] + xb[1] + xb[2] + xb[3])));
            ihi = _mm256_sub_epi32(ihi, _mm256_set1_epi32(8 * (xb[4] + xb[5] + xb[6] + xb[7])));
          }
          acc[i][2 * pp] = _mm256_fmadd_ps(scale[i], _mm256_cvtepi32_ps(ilo), acc[i][2 * pp]);
          acc[i][2 * pp + 1] = _mm256_fmadd_ps(scale[i], _mm256_cvtepi32_ps(ihi), acc[i][2 * pp + 1]);
        }
      }
    }
    if constexpr (kHasMin && kFirstGroup + kNumGroups == 8) {
      const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kPackedMins + 16 * h)));
      for (int i = 0; i < R; ++i) {
        macc[i] = _mm256_fmadd_ps(mw, _mm256_set1_ps(job.xsx[(r0 + i) * nb + b]), macc[i]);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int gg = 0; gg < kNumGroups; ++gg) lanes[i][kFirstGroup + gg] = acc[i][gg];
  }
}

// Quantized formats: R (1 or 2) rows of one 8-lane half h of a tile; its first group pass asks
// for the next tile's lines `ahead`.
template <PackedFormat F, int R>
TROUPE_TARGET_AVX2 void quant_half_rows(const TileJob& job, const uint8_t* tile, int h, int64_t r0,
                                        int64_t o0, const AheadLines& ahead) {
  __m256 lanes[R][8];
  __m256 macc[R];
  for (auto& m : macc) m = _mm256_setzero_ps();
  if constexpr (R == 1) {
    quant_half_pass<F, R, 0, 8>(job, tile, h, r0, lanes, macc, ahead);
  } else {
    quant_half_pass<F, R, 0, 4>(job, tile, h, r0, lanes, macc, ahead);
    quant_half_pass<F, R, 4, 4>(job, tile, h, r0, lanes, macc, AheadLines{});
  }
  for (int i = 0; i < R; ++i) {
    __m256 y = avx2::fold_groups(lanes[i]);
    if constexpr (has_packed_min(F)) y = _mm256_add_ps(y, macc[i]);
    avx2::store_lanes(job.y + (r0 + i) * job.ldy + o0 + 8 * h, y, job.num_outputs - o0 - 8 * h);
  }
}

template <PackedFormat F>
TROUPE_TARGET_AVX2 inline __m256 load_float_half(const uint8_t* p) {
  if constexpr (F == PackedFormat::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (F == PackedFormat::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
}

template <PackedFormat F, int R>
TROUPE_TARGET_AVX2 void float_half(const TileJob& job, const uint8_t* tile, int h, int64_t r0,
                                   int64_t o0, const AheadLines& ahead) {
  constexpr int kStride = packed_block_bytes(F);
  constexpr int kHalf = kStride / 2;
  const char* next = ahead.next;
  __m256 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t k0 = 0; k0 < job.num_inputs; k0 += kQuantBlock) {
    ask_ahead(next, ahead);
    const int64_t k1 = std::min<int64_t>(job.num_inputs, k0 + kQuantBlock);
    for (int64_t k = k0; k < k1; ++k) {
      const __m256 w = load_float_half<F>(tile + k * kStride + kHalf * h);
      for (int i = 0; i < R; ++i) {
        acc[i] = _mm256_fmadd_ps(w, _mm256_set1_ps(job.x[(r0 + i) * job.ldx + k]), acc[i]);
      }
    }
  }
  const int64_t valid = job.num_outputs - o0 - 8 * h;
  for (int i = 0; i < R; ++i) avx2::store_lanes(job.y + (r0 + i) * job.ldy + o0 + 8 * h, acc[i], valid);
}

// Quantized formats: tiles [tile_begin, tile_end), each as passes over its halves' row pairs
// (and a last odd row), which ask for the next tile as they go (AheadPlan).
template <PackedFormat F>
TROUPE_TARGET_AVX2 void run_quant_halves(const TileJob& job, int64_t tile_begin,
                                         int64_t tile_end) {
  const int64_t pairs = (job.num_rows + 1) / 2;
  const AheadPlan plan(job, 2 * pairs);
  for (int64_t t = tile_begin; t < tile_end; ++t) {
    const auto* tile = reinterpret_cast<const uint8_t*>(job.tiles + t * job.tile_bytes);
    const int64_t o0 = t * kTileOutputs;
    const bool last_tile = t + 1 == tile_end;
    const char* next = reinterpret_cast<const char*>(tile + job.tile_bytes);
    for (int h = 0; h < 2 && o0 + 8 * h < job.num_outputs; ++h) {
      for (int64_t p = 0; p < pairs; ++p) {
        const AheadLines ahead = plan.take(next, h * pairs + p, last_tile);
        if (2 * p + 2 <= job.num_rows) {
          quant_half_rows<F, 2>(job, tile, h, 2 * p, o0, ahead);
        } else {
          quant_half_rows<F, 1>(job, tile, h, 2 * p, o0, ahead);
        }
      }
    }
  }
}

// run_tiles' kernel for the float formats: the 8-lane half `part` of a tile for R rows.
template <PackedFormat F>
struct FloatHalfKernel {
  template <int R>
  TROUPE_TARGET_AVX2 static void rows(const TileJob& job, const uint8_t* tile, int part, int64_t r0,
                                      int64_t o0, const AheadLines& ahead) {
    float_half<F, R>(job, tile, part, r0, o0, ahead);
  }
};

struct Avx2Runner {
  template <PackedFormat F>
  static void run(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
    if constexpr (is_legacy_format(F)) {
      run_quant_halves<F>(job, tile_begin, tile_end);  // eight accumulators per row: 2 rows
    } else {
      run_tiles<FloatHalfKernel<F>, 2, kFloatRows>(job, tile_begin, tile_end);
    }
  }
};

}  // namespace

// Activation quantization, the scalar form's operations per element: amax (order-free), codes
// round(x * (127 / amax)) to nearest even (cvtps2dq) clamped to +-127, exact integer sums, and
// the scales rounded through fp16 (vcvtps2ph, as fp32_to_fp16).
TROUPE_TARGET_AVX2 void quantize_rows_avx2(const QuantizeJob& job, int64_t row_begin,
                                           int64_t row_end) {
  const int64_t nb = job.num_cols / kQuantBlock;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i lim = _mm256_set1_epi32(127), neg_lim = _mm256_set1_epi32(-127);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* xr = job.x + r * job.ldx;
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = xr + b * kQuantBlock;
      __m256 v[4];
      for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(xb + 8 * i);
      __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
                               _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)));
      __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
      h = _mm_max_ps(h, _mm_movehl_ps(h, h));
      h = _mm_max_ss(h, _mm_movehdup_ps(h));
      const float amax = _mm_cvtss_f32(h);
      const float d = amax / 127.0f;
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      const __m256 vid = _mm256_set1_ps(id);
      __m256i q[4];
      for (int i = 0; i < 4; ++i) {
        q[i] = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[i], vid)), neg_lim), lim);
      }
      const __m256i q8 = _mm256_permutevar8x32_epi32(
          _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])), order);
      const int64_t rb = r * nb + b;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(job.qs + r * job.num_cols + b * kQuantBlock), q8);
      const __m256i groups = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q8), ones16);
      const int32_t sum = avx2::store_group_sums(job.group_bias + rb * 8, groups);
      job.sum[rb] = sum;
      const __m128 pair = _mm_setr_ps(d, d * static_cast<float>(sum), 0.0f, 0.0f);
      const __m128 rounded = _mm_cvtph_ps(_mm_cvtps_ph(pair, _MM_FROUND_TO_NEAREST_INT));
      job.scale[rb] = _mm_cvtss_f32(rounded);
      job.scaled_sum[rb] = _mm_cvtss_f32(_mm_movehdup_ps(rounded));
    }
  }
}

void matmul_tiles_avx2(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
  dispatch_format<Avx2Runner>(job, tile_begin, tile_end);
}

#else
void matmul_tiles_avx2(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
  matmul_tiles_scalar(job, tile_begin, tile_end);
}
void quantize_rows_avx2(const QuantizeJob&, int64_t, int64_t) {}
#endif

}  // namespace troupe::gpu::cpu::detail
