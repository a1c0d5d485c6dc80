// AVX-512 VNNI tile kernels of the batched matmul (layouts in matmul_kernels.hpp, numerics in
// matmul.hpp). Up to two rows (quantized) or eight (float) share each unpacked weight vector;
// a quantized tile meeting many rows is unpacked once per thread instead (UnpackedBlock). Every
// tile's passes ask for the next tile as they go (AheadPlan, matmul_simd.hpp).
#include <algorithm>
#include <cstring>
#include <vector>

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

// The offset a format's stored codes carry (group_dot subtracts it).
template <PackedFormat F>
inline constexpr int32_t kCodeOffset = F == PackedFormat::kQ8_0   ? 128
                                       : F == PackedFormat::kQ4_0 ? 8
                                                                  : 0;

// A quantized tile's block with its codes as bytes and its scales as float: what quant_tile
// computes from the packed block before its products, computed once for every row of a call.
// For Q4, quant_tile spends 3 vector operations per 64-byte chunk on the nibbles (and, shift,
// and) and 4 per block on the fp16 scales, for only 2 rows: ~0.75 extra operation per
// vpdpbusd-cvt-fma triple, on the two ports that triple saturates. Read from here, the weights
// cost loads only. Byte formats (Q8_0, Q5_1) are read packed: their codes are bytes already, and
// a copy cost only its stores (Q8_0 copied: 3-12 % slower at 16-64 rows, K 576-1,536; Q5_1
// level, 0.95-1.15; matmul_bench --stream-mib 128, copied and packed alternated in one process).
struct alignas(64) UnpackedBlock {
  uint8_t groups[8][64];  // group g: inputs 4g..4g+3 of the 16 lanes (the Q8 chunk layout)
  float d[kTileOutputs];
  float m[kTileOutputs];  // Q4_1's and Q5_1's mins; unused otherwise
};

// The weights of a tile as the kernel reads them, per block b: the 16 lanes' scales (and mins)
// as float, and group g's codes as bytes (inputs 4g..4g+3 of each lane). PackedWeights derives
// them from the packed block (Q4: group 2p is chunk p's low nibbles, 2p + 1 its high ones; the
// kernel's unrolled group loop loads each chunk once); UnpackedWeights reads an unpacked tile.
template <PackedFormat F>
struct PackedWeights {
  static constexpr int kBlockBytes = packed_block_bytes(F);
  static constexpr bool kQ4 = F == PackedFormat::kQ4_0 || F == PackedFormat::kQ4_1;
  const uint8_t* tile;

  TROUPE_TARGET_AVX512 static __m512 fp16_lanes(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }

  TROUPE_TARGET_AVX512 __m512 d(int64_t b) const { return fp16_lanes(tile + b * kBlockBytes); }
  TROUPE_TARGET_AVX512 __m512 m(int64_t b) const {
    return fp16_lanes(tile + b * kBlockBytes + kPackedMins);
  }
  TROUPE_TARGET_AVX512 __m512i group(int64_t b, int g) const {
    const uint8_t* qs = tile + b * kBlockBytes + packed_header_bytes(has_packed_min(F));
    if constexpr (kQ4) {
      const __m512i v = _mm512_loadu_si512(qs + 64 * (g / 2));
      const __m512i low4 = _mm512_set1_epi8(0x0F);
      return g % 2 == 0 ? _mm512_and_si512(v, low4)
                        : _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    } else {
      return _mm512_loadu_si512(qs + 64 * g);
    }
  }
};

struct UnpackedWeights {
  const UnpackedBlock* blocks;

  TROUPE_TARGET_AVX512 __m512 d(int64_t b) const { return _mm512_load_ps(blocks[b].d); }
  TROUPE_TARGET_AVX512 __m512 m(int64_t b) const { return _mm512_load_ps(blocks[b].m); }
  TROUPE_TARGET_AVX512 __m512i group(int64_t b, int g) const {
    return _mm512_load_si512(blocks[b].groups[g]);
  }
};

// A tile's first pass reads it packed and leaves it unpacked for the passes after it: each block's
// scales and groups are stored into `out` as the products use them. The stores go to the store
// ports, beside the pass's vpdpbusd-cvt-FMA work; in a loop of their own before the passes (as
// before) they held the products up: these are 3-5 % cheaper at 16 rows, 5-9 % at 8 (K <=
// 1,536; matmul_bench, both forms alternated in one process).
template <PackedFormat F>
struct UnpackingWeights {
  PackedWeights<F> packed;
  UnpackedBlock* out;

  TROUPE_TARGET_AVX512 __m512 d(int64_t b) const {
    const __m512 v = packed.d(b);
    _mm512_store_ps(out[b].d, v);
    return v;
  }
  TROUPE_TARGET_AVX512 __m512 m(int64_t b) const {
    const __m512 v = packed.m(b);
    _mm512_store_ps(out[b].m, v);
    return v;
  }
  TROUPE_TARGET_AVX512 __m512i group(int64_t b, int g) const {
    const __m512i v = packed.group(b, g);
    _mm512_store_si512(out[b].groups[g], v);
    return v;
  }
};

// Quantized formats: R rows (1 or 2) starting at row r0 against one tile, in ggml's
// order (matmul.hpp): eight float accumulators per (row, output), one per 4-input group of a
// block, combined at the end as ggml's hsum_float_8; Q4_1/Q5_1's m * s terms in their own chain.
// `ahead`: lines of the next tile to ask for as it goes (AheadPlan).
template <PackedFormat F, int R, class Weights>
TROUPE_TARGET_AVX512 void quant_tile(const TileJob& job, const Weights& w, int64_t r0, int64_t o0,
                                     const AheadLines& ahead) {
  constexpr bool kHasMin = has_packed_min(F);
  const int64_t nb = job.num_inputs / kQuantBlock;
  const int64_t K = job.num_inputs;
  __m512 acc[R][8];
  __m512 macc[R];
  for (int i = 0; i < R; ++i) {
    for (auto& a : acc[i]) a = _mm512_setzero_ps();
    macc[i] = _mm512_setzero_ps();
  }
  const char* next = ahead.next;
  for (int64_t b = 0; b < nb; ++b) {
    ask_ahead(next, ahead);
    const __m512 dw = w.d(b);
    __m512 scale[R];
    for (int i = 0; i < R; ++i) {
      scale[i] = _mm512_mul_ps(dw, _mm512_set1_ps(job.dx[(r0 + i) * nb + b]));
    }
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      const __m512i codes = w.group(b, g);
      for (int i = 0; i < R; ++i) {
        const int8_t* xb = job.xq + (r0 + i) * K + b * kQuantBlock + 4 * g;
        const int32_t* bias = job.xgb + ((r0 + i) * nb + b) * 8 + g;
        const __m512 dot = group_dot<kCodeOffset<F>>(codes, xb, bias);
        acc[i][g] = _mm512_fmadd_ps(scale[i], dot, acc[i][g]);
      }
    }
    if constexpr (kHasMin) {
      const __m512 mw = w.m(b);
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

// Rows of a call from which unpacking a Q4 tile pays, now that the first pass unpacks as it
// goes: per 16x4 product, unpacked / packed, weights streamed (matmul_bench --stream-mib 128,
// both forms alternated in one process, 2 runs, Xeon AVX-512 VNNI, 2026-12-06), Q4_1 and Q4_0:
//   rows        4            6            8            12
//   K 576    0.96-0.97    0.88-0.94    0.85-0.94    0.84-0.91
//   K 1,536  1.01-1.06    0.95-0.99    0.91-0.94    0.80-0.89
//   K 4,096  1.21-1.24    1.13-1.14    1.04-1.09    0.91-0.99
// So from 12 rows at any width, from 6 while the scratch (20 bytes per input) stays in L1.
// (With the unpack a loop of its own before the passes, the thresholds were 16 and 8.)
constexpr int64_t kUnpackRows = 12;
constexpr int64_t kUnpackRowsInL1 = 6;
constexpr size_t kUnpackL1Bytes = 32 * 1024;

template <PackedFormat F>
bool unpacking_pays(const TileJob& job) {
  if constexpr (!PackedWeights<F>::kQ4) {
    return false;
  } else {
    const size_t scratch =
        static_cast<size_t>(job.num_inputs / kQuantBlock) * sizeof(UnpackedBlock);
    return job.num_rows >= kUnpackRows ||
           (job.num_rows >= kUnpackRowsInL1 && scratch <= kUnpackL1Bytes);
  }
}

// The calling thread's unpacked tile, at least `blocks` blocks: each thread that multiplies
// (the backend's step thread, the pool's workers) keeps one, grown to the widest matrix it met
// (~10-300 KB), so concurrent calls never share one.
UnpackedBlock* thread_scratch(int64_t blocks) {
  thread_local std::vector<UnpackedBlock> scratch;
  if (scratch.size() < static_cast<size_t>(blocks)) scratch.resize(blocks);
  return scratch.data();
}

// The products of tiles [tile_begin, tile_end) for every row: per tile, passes over the row pairs
// (and a last odd row), reading the packed tile, or (kUnpack) the tile unpacked by the first pass
// into this thread's scratch (UnpackingWeights) for the others.
//
// The weights stream from memory once per call (a model's matrices outgrow L2 and, on a shared
// host, L3; ~11 GB/s per core here), so each tile's passes also ask for the next tile into L2:
// its lines are dealt out over the passes, a line or two per block, so that only a few are in
// flight at once. Asked for in one burst (the whole next tile during the unpack, as before),
// most waited for a line fill buffer (16 per core) and the burst stalled the unpack; with no
// software prefetch at all (the packed path before), the hardware prefetchers alone kept ~6 GB/s.
// matmul_bench --stream-mib 128 (Q4_1, one thread, 2026-12-06, alternated in one process):
// unpacked, 16 rows 0.81-0.88 -> 0.70-0.78 ns per 16x4 product at K 576-4,096, 8 rows (K <=
// 1,536) 0.99-1.02 -> 0.75-0.83, 64 rows 0.66-0.75 -> 0.63-0.72 (L2-resident weights:
// 0.66-0.72); packed, see kUnpackRows.
template <PackedFormat F, bool kUnpack>
TROUPE_TARGET_AVX512 void run_quant_tiles(const TileJob& job, int64_t tile_begin,
                                          int64_t tile_end) {
  const int64_t nb = job.num_inputs / kQuantBlock;
  UnpackedBlock* scratch = kUnpack ? thread_scratch(nb) : nullptr;
  const int64_t passes = (job.num_rows + 1) / 2;
  const AheadPlan plan(job, passes);
  for (int64_t t = tile_begin; t < tile_end; ++t) {
    const auto* tile = reinterpret_cast<const uint8_t*>(job.tiles + t * job.tile_bytes);
    const int64_t o0 = t * kTileOutputs;
    const bool last_tile = t + 1 == tile_end;
    const char* next = reinterpret_cast<const char*>(tile + job.tile_bytes);
    const auto pass = [&](const auto& w, int64_t p) {
      const AheadLines ahead = plan.take(next, p, last_tile);
      if (2 * p + 2 <= job.num_rows) {
        quant_tile<F, 2>(job, w, 2 * p, o0, ahead);
      } else {
        quant_tile<F, 1>(job, w, 2 * p, o0, ahead);
      }
    };
    if constexpr (kUnpack) {
      pass(UnpackingWeights<F>{PackedWeights<F>{tile}, scratch}, 0);
      for (int64_t p = 1; p < passes; ++p) pass(UnpackedWeights{scratch}, p);
    } else {
      for (int64_t p = 0; p < passes; ++p) pass(PackedWeights<F>{tile}, p);
    }
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
                                     int64_t o0, const AheadLines& ahead) {
  constexpr int kStride = packed_block_bytes(F);
  const char* next = ahead.next;
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t k0 = 0; k0 < job.num_inputs; k0 += kQuantBlock) {
    ask_ahead(next, ahead);
    const int64_t k1 = std::min<int64_t>(job.num_inputs, k0 + kQuantBlock);
    for (int64_t k = k0; k < k1; ++k) {
      const __m512 w = load_float_lanes<F>(tile + k * kStride);
      for (int i = 0; i < R; ++i) {
        acc[i] = _mm512_fmadd_ps(w, _mm512_set1_ps(job.x[(r0 + i) * job.ldx + k]), acc[i]);
      }
    }
  }
  const int64_t valid = job.num_outputs - o0;
  for (int i = 0; i < R; ++i) avx512::store_lanes(job.y + (r0 + i) * job.ldy + o0, acc[i], valid);
}

// run_tiles' kernel for the float formats: a whole 16-lane tile (one part) for R rows.
template <PackedFormat F>
struct FloatTileKernel {
  template <int R>
  TROUPE_TARGET_AVX512 static void rows(const TileJob& job, const uint8_t* tile, int /*part*/,
                                        int64_t r0, int64_t o0, const AheadLines& ahead) {
    float_tile<F, R>(job, tile, r0, o0, ahead);
  }
};

struct Avx512Runner {
  template <PackedFormat F>
  static void run(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
    if constexpr (is_legacy_format(F)) {
      if (unpacking_pays<F>(job)) {
        run_quant_tiles<F, true>(job, tile_begin, tile_end);
      } else {
        run_quant_tiles<F, false>(job, tile_begin, tile_end);
      }
    } else {
      run_tiles<FloatTileKernel<F>, 1, kFloatRows>(job, tile_begin, tile_end);
    }
  }
};

}  // namespace

void matmul_tiles_avx512(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
  dispatch_format<Avx512Runner>(job, tile_begin, tile_end);
}

// Codes of 16 activations: round(x * id) to nearest even, clamped to +-127, as bytes.
TROUPE_TARGET_AVX512 static inline __m128i sixteen_codes(const float* x, __m512 id) {
  const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x), id));
  return _mm512_cvtepi32_epi8(
      _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127)));
}

// Activation quantization, quantize_rows_avx2's operations per element and per block, with what
// that form does one block at a time in scalar registers -- the divisions d = amax / 127 and
// 127 / amax (IEEE, so a vector division rounds as the scalar one), the fp16 rounding of d and
// d * sum -- done for 16 blocks at once, and each block's codes in two 16-lane vectors. vpmovdb
// truncates codes already clamped to +-127, so they keep their order without packs + permute;
// vpdpbusd against ones gives the 4-code group sums (maddubs + madd in the AVX2 form).
TROUPE_TARGET_AVX512 void quantize_rows_avx512(const QuantizeJob& job, int64_t row_begin,
                                               int64_t row_end) {
  constexpr int kBlocksAtOnce = 16;
  const int64_t nb = job.num_cols / kQuantBlock;
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m512 v127 = _mm512_set1_ps(127.0f);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* xr = job.x + r * job.ldx;
    for (int64_t b0 = 0; b0 < nb; b0 += kBlocksAtOnce) {
      const int n = static_cast<int>(std::min<int64_t>(kBlocksAtOnce, nb - b0));
      const auto lanes = static_cast<__mmask16>((1u << n) - 1);
      alignas(64) float amax[kBlocksAtOnce];
      for (int j = 0; j < n; ++j) {
        const float* xb = xr + (b0 + j) * kQuantBlock;
        amax[j] = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb)),
                                                     _mm512_abs_ps(_mm512_loadu_ps(xb + 16))));
      }
      const __m512 a = _mm512_maskz_load_ps(lanes, amax);
      const __m512 d = _mm512_div_ps(a, v127);
      // amax != 0 ? 127 / amax : 0, with C's != (true for NaN).
      const __mmask16 nonzero = _mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_NEQ_UQ);
      alignas(64) float inverse[kBlocksAtOnce];
      _mm512_store_ps(inverse, _mm512_maskz_div_ps(nonzero & lanes, v127, a));
      alignas(64) int32_t sums[kBlocksAtOnce];
      for (int j = 0; j < n; ++j) {
        const int64_t b = b0 + j;
        const float* xb = xr + b * kQuantBlock;
        const __m512 id = _mm512_set1_ps(inverse[j]);
        const __m256i q8 = _mm256_inserti128_si256(
            _mm256_castsi128_si256(sixteen_codes(xb, id)), sixteen_codes(xb + 16, id), 1);
        _mm256_storeu_si256(
            reinterpret_cast<__m256i*>(job.qs + r * job.num_cols + b * kQuantBlock), q8);
        const __m256i groups = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones8, q8);
        sums[j] = avx2::store_group_sums(job.group_bias + (r * nb + b) * 8, groups);
      }
      const int64_t rb = r * nb + b0;
      const __m512i sum = _mm512_maskz_load_epi32(lanes, sums);
      _mm512_mask_storeu_epi32(job.sum + rb, lanes, sum);
      const __m512 scaled = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sum));
      _mm512_mask_storeu_ps(job.scale + rb, lanes,
                            _mm512_cvtph_ps(_mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT)));
      _mm512_mask_storeu_ps(job.scaled_sum + rb, lanes,
                            _mm512_cvtph_ps(_mm512_cvtps_ph(scaled, _MM_FROUND_TO_NEAREST_INT)));
    }
  }
}

#else
void matmul_tiles_avx512(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
  matmul_tiles_scalar(job, tile_begin, tile_end);
}
void quantize_rows_avx512(const QuantizeJob&, int64_t, int64_t) {}
#endif

}  // namespace troupe::gpu::cpu::detail
