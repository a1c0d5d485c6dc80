// K-quant x Q8_K dots in llama.cpp's orders (see matmul_q8k.hpp).
#include "gpu/cpu/matmul_q8k.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/vec_math.hpp"
#include "model/fp16.hpp"
#include "model/quants/kquant.hpp"

namespace troupe::gpu::cpu {
namespace {

using model::quants::BlockQ4_K;
using model::quants::BlockQ5_K;
using model::quants::BlockQ6_K;

// ggml's nearest_int: round half to even through the float magic number (|v| <= 2^22).
inline int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &shifted, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// One super-block's exact integers: lanes[L] as matmul_q8k.hpp defines them, and Q4_K's four
// min lanes (Q6_K: zeros).
struct BlockInts {
  int32_t lanes[8];
  int32_t mins[4];
};

// Q4_K / Q5_K: the code of element t (0..31) of the low (sub-block 2j) or high (2j + 1) half of
// the 64-element chunk j; Q5_K adds its fifth bit, bit 2j (low) or 2j + 1 (high) of qh[t].
template <typename Block>
int32_t k_code(const Block& x, int j, int t, int high) {
  const uint8_t q = x.qs[32 * j + t];
  const int32_t nibble = high != 0 ? q >> 4 : q & 0x0F;
  if constexpr (std::is_same_v<Block, BlockQ5_K>) {
    return nibble | (((x.qh[t] >> (2 * j + high)) & 1) << 4);
  }
  return nibble;
}

template <typename Block>
void k4_ints_scalar(const Block& x, const BlockQ8K& y, BlockInts& out) {
  int32_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    const model::quants::ScaleMin sm = model::quants::scale_min_k4(j, x.scales);
    sc[j] = sm.scale;
    mn[j] = sm.min;
  }
  for (int k = 0; k < 4; ++k) {
    const int32_t s0 = y.bsums[4 * k] + y.bsums[4 * k + 1];
    const int32_t s1 = y.bsums[4 * k + 2] + y.bsums[4 * k + 3];
    out.mins[k] = mn[2 * k] * s0 + mn[2 * k + 1] * s1;
  }
  for (int32_t& l : out.lanes) l = 0;
  for (int j = 0; j < 4; ++j) {
    const int8_t* q8 = y.qs + 64 * j;
    for (int L = 0; L < 8; ++L) {
      int32_t lo = 0, hi = 0;
      for (int t = 4 * L; t < 4 * L + 4; ++t) {
        lo += k_code(x, j, t, 0) * q8[t];
        hi += k_code(x, j, t, 1) * q8[32 + t];
      }
      out.lanes[L] += sc[2 * j] * lo + sc[2 * j + 1] * hi;
    }
  }
}

void q6_k_ints_scalar(const BlockQ6_K& x, const BlockQ8K& y, BlockInts& out) {
  for (int32_t& l : out.lanes) l = 0;
  for (int32_t& m : out.mins) m = 0;
  for (int j = 0; j < 2; ++j) {  // 128 elements: four chunks of 32
    const uint8_t* ql = x.ql + 64 * j;
    const uint8_t* qh = x.qh + 32 * j;
    for (int k = 0; k < 4; ++k) {
      const int c = 4 * j + k;
      const int8_t* q8 = y.qs + 32 * c;
      for (int L = 0; L < 8; ++L) {
        int32_t sum = 0;
        for (int t = 4 * L; t < 4 * L + 4; ++t) {
          const int lo = k == 0 ? ql[t] & 0x0F
                         : k == 1 ? ql[32 + t] & 0x0F
                         : k == 2 ? ql[t] >> 4
                                  : ql[32 + t] >> 4;
          sum += (lo | (((qh[t] >> (2 * k)) & 3) << 4)) * q8[t];
        }
        out.lanes[L] += x.scales[2 * c + (L >= 4 ? 1 : 0)] * sum;
      }
    }
  }
  for (int L = 0; L < 8; ++L) {
    out.lanes[L] -= 32 * (y.bsums[2 * L] * x.scales[2 * L] + y.bsums[2 * L + 1] * x.scales[2 * L + 1]);
  }
}

// The float side of one super-block in each order, on the integers above.
// Q4_K keeps its min terms in four float lanes; Q5_K sums them as an integer and chains one
// float (summs = fma(dmin, float(s2), summs): the scalar statement the x86 build compiles with
// contraction); Q6_K has none.
enum class MinForm { kNone, kLanes, kChain };

template <typename Block>
constexpr MinForm min_form_of() {
  if constexpr (std::is_same_v<Block, BlockQ4_K>) return MinForm::kLanes;
  if constexpr (std::is_same_v<Block, BlockQ5_K>) return MinForm::kChain;
  return MinForm::kNone;
}

template <MinForm kMin>
struct VecDotAcc {
  float acc[8] = {};
  float accm[4] = {};
  float summs = 0.0f;
  void add(float d, float dmin, const BlockInts& b) {
    for (int L = 0; L < 8; ++L) acc[L] = std::fma(d, static_cast<float>(b.lanes[L]), acc[L]);
    if constexpr (kMin == MinForm::kLanes) {
      for (int k = 0; k < 4; ++k) accm[k] = std::fma(dmin, static_cast<float>(b.mins[k]), accm[k]);
    } else if constexpr (kMin == MinForm::kChain) {
      const int32_t s2 = (b.mins[0] + b.mins[1]) + (b.mins[2] + b.mins[3]);
      summs = std::fma(dmin, static_cast<float>(s2), summs);
    }
  }
  float result() const {
    const float v = hsum8(acc);
    if constexpr (kMin == MinForm::kLanes) return v + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
    if constexpr (kMin == MinForm::kChain) return v + summs;
    return v;
  }
};

inline float tiled_step(float out, float d0, float dmin0, float dy, int32_t s1, int32_t s2,
                        bool has_min) {
  float res = d0 * static_cast<float>(s1);
  if (has_min) res = std::fma(-dmin0, static_cast<float>(s2), res);
  return std::fma(res, dy, out);
}

template <typename Block, typename Ints>
float dot_scalar(const Block* x, const BlockQ8K* y, int64_t nb, Q8KOrder order, Ints ints) {
  constexpr MinForm kMin = min_form_of<Block>();
  constexpr bool kHasMin = kMin != MinForm::kNone;
  VecDotAcc<kMin> v;
  float out = 0.0f;
  BlockInts b;
  for (int64_t i = 0; i < nb; ++i) {
    ints(x[i], y[i], b);
    const float d0 = model::fp16_to_fp32(x[i].d);
    float dmin0 = 0.0f;
    if constexpr (kHasMin) dmin0 = model::fp16_to_fp32(x[i].dmin);
    if (order == Q8KOrder::kVecDot) {
      v.add(y[i].d * d0, -y[i].d * dmin0, b);
    } else {
      int32_t s1 = 0, s2 = 0;
      for (int32_t l : b.lanes) s1 += l;
      for (int32_t m : b.mins) s2 += m;
      out = tiled_step(out, d0, dmin0, y[i].d, s1, s2, kHasMin);
    }
  }
  return order == Q8KOrder::kVecDot ? v.result() : out;
}

#if TROUPE_X86
// One weight super-block made ready for the integer dots with any number of activation rows:
// its 256 codes as unsigned bytes in eight 32-element chunks (chunk c = elements 32c..32c+31,
// the activation's order), each chunk's int16 scale lanes, and what the min / offset terms need.
// A row's lanes are then sum_c madd(scales[c], maddubs(codes[c], q8 chunk c)): lane L gets bytes
// 4L..4L+3 of every chunk, the integers the scalar forms compute (exact, so any add order).
struct Prepared {
  __m256i codes[8];
  __m256i scales[8];
  __m128i mins;       // Q4_K/Q5_K: the 8 sub-block mins as int16
  __m256i scales16;   // Q6_K: the 16 scales as int16 (the -32 offset term)
  float d0 = 0.0f, dmin0 = 0.0f;
};

TROUPE_TARGET_AVX2 inline void prepare_scales_mins(const uint8_t* packed, Prepared& p) {
  alignas(16) int16_t mn[8];
  for (int j = 0; j < 8; ++j) {
    const model::quants::ScaleMin sm = model::quants::scale_min_k4(j, packed);
    p.scales[j] = _mm256_set1_epi16(sm.scale);
    mn[j] = sm.min;
  }
  p.mins = _mm_load_si128(reinterpret_cast<const __m128i*>(mn));
}

TROUPE_TARGET_AVX2 inline void prepare(const BlockQ4_K& x, Prepared& p) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  prepare_scales_mins(x.scales, p);
  for (int j = 0; j < 4; ++j) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * j));
    p.codes[2 * j] = _mm256_and_si256(bits, m4);
    p.codes[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
  }
  p.d0 = model::fp16_to_fp32(x.d);
  p.dmin0 = model::fp16_to_fp32(x.dmin);
}

// Q4_K's codes with the fifth bit (qh bit 2j, 2j + 1) added.
TROUPE_TARGET_AVX2 inline void prepare(const BlockQ5_K& x, Prepared& p) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  prepare_scales_mins(x.scales, p);
  const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh));
  for (int j = 0; j < 4; ++j) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * j));
    const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j), one);
    const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j + 1), one);
    p.codes[2 * j] = _mm256_or_si256(_mm256_and_si256(bits, m4), _mm256_slli_epi16(h0, 4));
    p.codes[2 * j + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                                         _mm256_slli_epi16(h1, 4));
  }
  p.d0 = model::fp16_to_fp32(x.d);
  p.dmin0 = model::fp16_to_fp32(x.dmin);
}

TROUPE_TARGET_AVX2 inline void prepare(const BlockQ6_K& x, Prepared& p) {
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i m15 = _mm256_set1_epi8(15);
  for (int j = 0; j < 2; ++j) {
    const uint8_t* ql = x.ql + 64 * j;
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
    const __m256i b2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
    const __m256i bh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh + 32 * j));
    p.codes[4 * j] =
        _mm256_or_si256(_mm256_and_si256(b1, m15), _mm256_slli_epi16(_mm256_and_si256(bh, m3), 4));
    p.codes[4 * j + 1] = _mm256_or_si256(
        _mm256_and_si256(b2, m15), _mm256_slli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8(12)), 2));
    p.codes[4 * j + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m15),
                                         _mm256_and_si256(bh, _mm256_set1_epi8(48)));
    p.codes[4 * j + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m15),
                                         _mm256_srli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8(-64)), 2));
  }
  for (int c = 0; c < 8; ++c) {
    p.scales[c] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(x.scales[2 * c])),
                                          _mm_set1_epi16(x.scales[2 * c + 1]), 1);
  }
  p.scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales)));
  p.d0 = model::fp16_to_fp32(x.d);
}

TROUPE_TARGET_AVX2 inline __m256i row_lanes(const Prepared& p, const BlockQ8K& y) {
  __m256i sumi = _mm256_setzero_si256();
  for (int c = 0; c < 8; ++c) {
    const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 32 * c));
    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p.scales[c], _mm256_maddubs_epi16(p.codes[c], q8)));
  }
  return sumi;
}

// The AVX-512 form of a prepared block: chunks 2k and 2k + 1 side by side in one zmm (codes and
// int16 scales), so one vpmaddubsw and one vpdpwssd (VNNI's int16 multiply-add into int32) take
// 64 codes where AVX2 needs vpmaddubsw, vpmaddwd and vpaddd for 32. The lanes' integers are the
// same (exact sums, any order), so the float side, and every bit, is AVX2's.
struct Prepared512 {
  __m512i codes[4];
  __m512i scales[4];
};

TROUPE_TARGET_AVX512 inline __m512i pair(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

TROUPE_TARGET_AVX512 inline void widen(const Prepared& p, Prepared512& w) {
  for (int k = 0; k < 4; ++k) {
    w.codes[k] = pair(p.codes[2 * k], p.codes[2 * k + 1]);
    w.scales[k] = pair(p.scales[2 * k], p.scales[2 * k + 1]);
  }
}

TROUPE_TARGET_AVX512 inline __m256i row_lanes(const Prepared512& p, const BlockQ8K& y) {
  __m512i sumi = _mm512_setzero_si512();
  for (int k = 0; k < 4; ++k) {
    const __m512i q8 = _mm512_loadu_si512(y.qs + 64 * k);
    sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(p.codes[k], q8), p.scales[k]);
  }
  return _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1));
}

// One activation row's float side over the super-blocks, in its order: dot_scalar's arithmetic,
// bit for bit (same integers, same float chain).
template <MinForm kMin>
struct RowChain {
  __m256 acc;
  __m128 accm;
  float summs, chain;

  TROUPE_TARGET_AVX2 void reset() {
    acc = _mm256_setzero_ps();
    accm = _mm_setzero_ps();
    summs = chain = 0.0f;
  }

  // Adds super-block p (its lanes sumi against row y).
  TROUPE_TARGET_AVX2 void add(const Prepared& p, const BlockQ8K& y, __m256i sumi, Q8KOrder order) {
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
    int32_t s2 = 0;
    __m128i prod = _mm_setzero_si128();
    if constexpr (kMin == MinForm::kNone) {
      sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(_mm256_madd_epi16(bsums, p.scales16), 5));
    } else {
      const __m128i s8 =
          _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
      prod = _mm_madd_epi16(p.mins, s8);
      alignas(16) int32_t m[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(m), prod);
      s2 = (m[0] + m[1]) + (m[2] + m[3]);
    }
    if (order == Q8KOrder::kTiled) {
      chain = tiled_step(chain, p.d0, p.dmin0, y.d, hsum_epi32_avx2(sumi), s2,
                         kMin != MinForm::kNone);
      return;
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(y.d * p.d0), _mm256_cvtepi32_ps(sumi), acc);
    if constexpr (kMin == MinForm::kLanes) {
      accm = _mm_fmadd_ps(_mm_set1_ps(-y.d * p.dmin0), _mm_cvtepi32_ps(prod), accm);
    } else if constexpr (kMin == MinForm::kChain) {
      summs = std::fma(-y.d * p.dmin0, static_cast<float>(s2), summs);
    }
  }

  TROUPE_TARGET_AVX2 float result(Q8KOrder order) const {
    if (order == Q8KOrder::kTiled) return chain;
    float v = hsum8_avx2(acc);
    if constexpr (kMin == MinForm::kLanes) {
      alignas(16) float m[4];
      _mm_store_ps(m, accm);
      v += (m[0] + m[2]) + (m[1] + m[3]);
    } else if constexpr (kMin == MinForm::kChain) {
      v += summs;
    }
    return v;
  }
};

// Rows [0, R) of activations against one weight row, all R sharing each prepared block.
template <typename Block, int R>
TROUPE_TARGET_AVX2 void dot_rows_avx2(const Block* x, const BlockQ8K* const* ys, int64_t nb,
                                      const Q8KOrder* orders, float* out) {
  RowChain<min_form_of<Block>()> rows[R];
  for (auto& row : rows) row.reset();
  Prepared p;
  for (int64_t i = 0; i < nb; ++i) {
    prepare(x[i], p);
    for (int r = 0; r < R; ++r) rows[r].add(p, ys[r][i], row_lanes(p, ys[r][i]), orders[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = rows[r].result(orders[r]);
}

// The same with the lanes' integers from the AVX-512 form (its own copy of the loop: a
// function's ISA target cannot be a template parameter, and the loop must inline both forms).
template <typename Block, int R>
TROUPE_TARGET_AVX512 void dot_rows_avx512(const Block* x, const BlockQ8K* const* ys, int64_t nb,
                                          const Q8KOrder* orders, float* out) {
  RowChain<min_form_of<Block>()> rows[R];
  for (auto& row : rows) row.reset();
  Prepared p;
  Prepared512 wide;
  for (int64_t i = 0; i < nb; ++i) {
    prepare(x[i], p);
    widen(p, wide);
    for (int r = 0; r < R; ++r) rows[r].add(p, ys[r][i], row_lanes(wide, ys[r][i]), orders[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = rows[r].result(orders[r]);
}

// Up to kRowGroup rows per pass over a weight row. AVX-512 takes 8: its 32 registers hold the
// chains beside the widened block, and each block's preparation serves twice the rows (Q4_K at
// 8-16 rows: 10-20 % faster than 4 per pass, matmul_bench, 2026-12-06).
constexpr int kRowGroup = 4;
constexpr int kRowGroup512 = 8;

inline int row_group(IsaLevel isa) {
  return isa == IsaLevel::kAvx512Vnni ? kRowGroup512 : kRowGroup;
}

// rows (1..R) rows in one pass: the AVX-512 form (kWide) from 2 rows; one row keeps the AVX2
// form, widening a block costing what its one row saves (Q4_K at 1 row: 0-18 % slower on
// AVX-512, from 2 rows faster; matmul_bench, 2026-12-06).
template <typename Block, int R, bool kWide>
void dot_rows_upto(const Block* x, const BlockQ8K* const* ys, int rows, int64_t nb,
                   const Q8KOrder* orders, float* out) {
  if constexpr (R > 1) {
    if (rows < R) return dot_rows_upto<Block, R - 1, kWide>(x, ys, rows, nb, orders, out);
  }
  if constexpr (kWide && R > 1) {
    dot_rows_avx512<Block, R>(x, ys, nb, orders, out);
  } else {
    dot_rows_avx2<Block, R>(x, ys, nb, orders, out);
  }
}

// rows <= row_group(isa).
template <typename Block>
void dot_rows(const Block* x, const BlockQ8K* const* ys, int rows, int64_t nb,
              const Q8KOrder* orders, float* out, IsaLevel isa) {
  if (isa == IsaLevel::kAvx512Vnni) {
    dot_rows_upto<Block, kRowGroup512, true>(x, ys, rows, nb, orders, out);
  } else {
    dot_rows_upto<Block, kRowGroup, false>(x, ys, rows, nb, orders, out);
  }
}

void dot_rows(model::TensorType type, const void* row, const BlockQ8K* const* ys, int rows,
              int64_t nb, const Q8KOrder* orders, float* out, IsaLevel isa) {
  if (type == model::TensorType::kQ4_K) {
    return dot_rows(static_cast<const BlockQ4_K*>(row), ys, rows, nb, orders, out, isa);
  }
  if (type == model::TensorType::kQ5_K) {
    return dot_rows(static_cast<const BlockQ5_K*>(row), ys, rows, nb, orders, out, isa);
  }
  return dot_rows(static_cast<const BlockQ6_K*>(row), ys, rows, nb, orders, out, isa);
}
#endif

}  // namespace

void quantize_row_q8k(const float* x, int64_t n, BlockQ8K* out) {
  for (int64_t b = 0; b < n / kQ8KBlock; ++b, x += kQ8KBlock) {
    BlockQ8K& y = out[b];
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < kQ8KBlock; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) amax = ax, max = x[j];
    }
    if (amax == 0.0f) {
      y.d = 0.0f;
      std::memset(y.qs, 0, sizeof(y.qs));
      std::memset(y.bsums, 0, sizeof(y.bsums));  // ggml leaves them; zero is what they sum to
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQ8KBlock; ++j) {
      const int v = nearest_int(iscale * x[j]);
      y.qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int j = 0; j < kQ8KBlock / 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += y.qs[16 * j + i];
      y.bsums[j] = static_cast<int16_t>(sum);
    }
    y.d = 1.0f / iscale;
  }
}

float dot_q8k(model::TensorType type, const void* row, const BlockQ8K* x, int64_t n, IsaLevel isa,
              Q8KOrder order) {
  const int64_t nb = n / kQ8KBlock;
#if TROUPE_X86
  if (isa != IsaLevel::kScalar) {
    float out;
    dot_rows(type, row, &x, 1, nb, &order, &out, isa);
    return out;
  }
#endif
  (void)isa;
  if (type == model::TensorType::kQ4_K) {
    return dot_scalar(static_cast<const BlockQ4_K*>(row), x, nb, order, k4_ints_scalar<BlockQ4_K>);
  }
  if (type == model::TensorType::kQ5_K) {
    return dot_scalar(static_cast<const BlockQ5_K*>(row), x, nb, order, k4_ints_scalar<BlockQ5_K>);
  }
  return dot_scalar(static_cast<const BlockQ6_K*>(row), x, nb, order, q6_k_ints_scalar);
}

void matmul_q8k_range(model::TensorType type, const uint8_t* w, size_t row_bytes,
                      int64_t num_inputs, const BlockQ8K* x, int64_t num_rows, float* y,
                      int64_t ldy, int64_t out_begin, int64_t out_end, IsaLevel isa,
                      const Q8KOrder* orders) {
  const int64_t blocks = num_inputs / kQ8KBlock;
  auto order_of = [&](int64_t r) { return orders != nullptr ? orders[r] : Q8KOrder::kVecDot; };
#if TROUPE_X86
  if (isa != IsaLevel::kScalar) {
    // Rows in slices that stay in L2 (64 rows of 2,048 inputs: 150 KB of Q8_K) while every
    // weight row of the range passes over them, row_group(isa) rows per pass.
    constexpr int64_t kRowSlice = 64;
    const int64_t group = row_group(isa);
    for (int64_t r0 = 0; r0 < num_rows; r0 += kRowSlice) {
      const int64_t r1 = std::min(num_rows, r0 + kRowSlice);
      for (int64_t o = out_begin; o < out_end; ++o) {
        const uint8_t* row = w + static_cast<size_t>(o) * row_bytes;
        for (int64_t r = r0; r < r1; r += group) {
          const int n = static_cast<int>(std::min<int64_t>(group, r1 - r));
          const BlockQ8K* ys[kRowGroup512];
          Q8KOrder ord[kRowGroup512];
          float out[kRowGroup512];
          for (int k = 0; k < n; ++k) {
            ys[k] = x + (r + k) * blocks;
            ord[k] = order_of(r + k);
          }
          dot_rows(type, row, ys, n, blocks, ord, out, isa);
          for (int k = 0; k < n; ++k) y[(r + k) * ldy + o] = out[k];
        }
      }
    }
    return;
  }
#endif
  for (int64_t o = out_begin; o < out_end; ++o) {
    const uint8_t* row = w + static_cast<size_t>(o) * row_bytes;
    for (int64_t r = 0; r < num_rows; ++r) {
      y[r * ldy + o] = dot_q8k(type, row, x + r * blocks, num_inputs, isa, order_of(r));
    }
  }
}

}  // namespace troupe::gpu::cpu
