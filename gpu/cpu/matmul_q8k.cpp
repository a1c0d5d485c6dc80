// K-quant x Q8_K dots in llama.cpp's orders (see matmul_q8k.hpp).
#include "gpu/cpu/matmul_q8k.hpp"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "gpu/cpu/isa_target.hpp"
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

inline float hsum8(const float* a) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

// One super-block's exact integers: lanes[L] as matmul_q8k.hpp defines them, and Q4_K's four
// min lanes (Q6_K: zeros).
struct BlockInts {
  int32_t lanes[8];
  int32_t mins[4];
};

void q4_k_ints_scalar(const BlockQ4_K& x, const BlockQ8K& y, BlockInts& out) {
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
  for (int j = 0; j < 4; ++j) {  // 64 elements: low nibbles (sub-block 2j), high (2j + 1)
    const uint8_t* q4 = x.qs + 32 * j;
    const int8_t* q8 = y.qs + 64 * j;
    for (int L = 0; L < 8; ++L) {
      int32_t lo = 0, hi = 0;
      for (int t = 4 * L; t < 4 * L + 4; ++t) {
        lo += (q4[t] & 0x0F) * q8[t];
        hi += (q4[t] >> 4) * q8[32 + t];
      }
      out.lanes[L] += sc[2 * j] * lo + sc[2 * j + 1] * hi;
    }
  }
}

// Q4_K's integers with a fifth bit per code: bit 2j (low nibbles) or 2j + 1 (high nibbles) of
// qh[t] for the 64-element chunk j.
void q5_k_ints_scalar(const BlockQ5_K& x, const BlockQ8K& y, BlockInts& out) {
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
    const uint8_t* q5 = x.qs + 32 * j;
    const int8_t* q8 = y.qs + 64 * j;
    for (int L = 0; L < 8; ++L) {
      int32_t lo = 0, hi = 0;
      for (int t = 4 * L; t < 4 * L + 4; ++t) {
        lo += ((q5[t] & 0x0F) | (((x.qh[t] >> (2 * j)) & 1) << 4)) * q8[t];
        hi += ((q5[t] >> 4) | (((x.qh[t] >> (2 * j + 1)) & 1) << 4)) * q8[32 + t];
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
  constexpr bool kHasMin = !std::is_same_v<Block, BlockQ6_K>;
  constexpr MinForm kMin = std::is_same_v<Block, BlockQ4_K>   ? MinForm::kLanes
                           : std::is_same_v<Block, BlockQ5_K> ? MinForm::kChain
                                                              : MinForm::kNone;
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
TROUPE_TARGET_AVX2 inline float hsum8_avx2(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

TROUPE_TARGET_AVX2 inline int32_t hsum_epi32_avx2(__m256i v) {
  __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtsi128_si32(r);
}

// q4_k_ints_scalar's lanes (sumi) and min lanes (prod), eight and four at a time.
TROUPE_TARGET_AVX2 inline void q4_k_ints_avx2(const BlockQ4_K& x, const BlockQ8K& y, __m256i& sumi,
                                              __m128i& prod) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  alignas(16) int16_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    const model::quants::ScaleMin sm = model::quants::scale_min_k4(j, x.scales);
    sc[j] = sm.scale;
    mn[j] = sm.min;
  }
  const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
  const __m128i s8 = _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
  prod = _mm_madd_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(mn)), s8);
  sumi = _mm256_setzero_si256();
  for (int j = 0; j < 4; ++j) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * j));
    const __m256i lo = _mm256_and_si256(bits, m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
    const __m256i xl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * j));
    const __m256i xh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * j + 32));
    const __m256i pl = _mm256_madd_epi16(_mm256_set1_epi16(sc[2 * j]), _mm256_maddubs_epi16(lo, xl));
    const __m256i ph = _mm256_madd_epi16(_mm256_set1_epi16(sc[2 * j + 1]), _mm256_maddubs_epi16(hi, xh));
    sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
  }
}

// q5_k_ints_scalar's lanes and min lanes: q4_k_ints_avx2 with the fifth bits added.
TROUPE_TARGET_AVX2 inline void q5_k_ints_avx2(const BlockQ5_K& x, const BlockQ8K& y, __m256i& sumi,
                                              __m128i& prod) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  alignas(16) int16_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    const model::quants::ScaleMin sm = model::quants::scale_min_k4(j, x.scales);
    sc[j] = sm.scale;
    mn[j] = sm.min;
  }
  const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
  const __m128i s8 = _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
  prod = _mm_madd_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(mn)), s8);
  const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh));
  sumi = _mm256_setzero_si256();
  for (int j = 0; j < 4; ++j) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * j));
    const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j), one);
    const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j + 1), one);
    const __m256i lo = _mm256_or_si256(_mm256_and_si256(bits, m4), _mm256_slli_epi16(h0, 4));
    const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                                       _mm256_slli_epi16(h1, 4));
    const __m256i xl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * j));
    const __m256i xh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * j + 32));
    const __m256i pl = _mm256_madd_epi16(_mm256_set1_epi16(sc[2 * j]), _mm256_maddubs_epi16(lo, xl));
    const __m256i ph = _mm256_madd_epi16(_mm256_set1_epi16(sc[2 * j + 1]), _mm256_maddubs_epi16(hi, xh));
    sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
  }
}

// q6_k_ints_scalar's lanes, eight at a time.
TROUPE_TARGET_AVX2 inline __m256i q6_k_ints_avx2(const BlockQ6_K& x, const BlockQ8K& y) {
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i m15 = _mm256_set1_epi8(15);
  const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
  const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
  const __m256i sub = _mm256_slli_epi32(_mm256_madd_epi16(bsums, _mm256_cvtepi8_epi16(scales)), 5);
  __m256i sumi = _mm256_setzero_si256();
  for (int j = 0; j < 2; ++j) {
    const uint8_t* ql = x.ql + 64 * j;
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
    const __m256i b2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
    const __m256i bh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh + 32 * j));
    const __m256i q[4] = {
        _mm256_or_si256(_mm256_and_si256(b1, m15), _mm256_slli_epi16(_mm256_and_si256(bh, m3), 4)),
        _mm256_or_si256(_mm256_and_si256(b2, m15),
                        _mm256_slli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8(12)), 2)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m15),
                        _mm256_and_si256(bh, _mm256_set1_epi8(48))),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m15),
                        _mm256_srli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8(-64)), 2))};
    for (int k = 0; k < 4; ++k) {
      const int c = 4 * j + k;
      const __m256i x8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 32 * c));
      const __m256i s16 = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_set1_epi16(x.scales[2 * c])), _mm_set1_epi16(x.scales[2 * c + 1]), 1);
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(s16, _mm256_maddubs_epi16(q[k], x8)));
    }
  }
  return _mm256_sub_epi32(sumi, sub);
}

TROUPE_TARGET_AVX2 float dot_q4_k_avx2(const BlockQ4_K* x, const BlockQ8K* y, int64_t nb,
                                       Q8KOrder order) {
  __m256 acc = _mm256_setzero_ps();
  __m128 accm = _mm_setzero_ps();
  float out = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    __m256i sumi;
    __m128i prod;
    q4_k_ints_avx2(x[i], y[i], sumi, prod);
    const float d0 = model::fp16_to_fp32(x[i].d);
    const float dmin0 = model::fp16_to_fp32(x[i].dmin);
    if (order == Q8KOrder::kVecDot) {
      accm = _mm_fmadd_ps(_mm_set1_ps(-y[i].d * dmin0), _mm_cvtepi32_ps(prod), accm);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * d0), _mm256_cvtepi32_ps(sumi), acc);
    } else {
      const __m128i p2 = _mm_add_epi32(prod, _mm_shuffle_epi32(prod, _MM_SHUFFLE(1, 0, 3, 2)));
      const int32_t s2 = _mm_cvtsi128_si32(_mm_add_epi32(p2, _mm_shuffle_epi32(p2, _MM_SHUFFLE(2, 3, 0, 1))));
      out = tiled_step(out, d0, dmin0, y[i].d, hsum_epi32_avx2(sumi), s2, true);
    }
  }
  if (order == Q8KOrder::kTiled) return out;
  alignas(16) float m[4];
  _mm_store_ps(m, accm);
  return hsum8_avx2(acc) + ((m[0] + m[2]) + (m[1] + m[3]));
}

TROUPE_TARGET_AVX2 float dot_q5_k_avx2(const BlockQ5_K* x, const BlockQ8K* y, int64_t nb,
                                       Q8KOrder order) {
  __m256 acc = _mm256_setzero_ps();
  float summs = 0.0f, out = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    __m256i sumi;
    __m128i prod;
    q5_k_ints_avx2(x[i], y[i], sumi, prod);
    const float d0 = model::fp16_to_fp32(x[i].d);
    const float dmin0 = model::fp16_to_fp32(x[i].dmin);
    alignas(16) int32_t m[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(m), prod);
    const int32_t s2 = (m[0] + m[1]) + (m[2] + m[3]);
    if (order == Q8KOrder::kVecDot) {
      summs = std::fma(-y[i].d * dmin0, static_cast<float>(s2), summs);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * d0), _mm256_cvtepi32_ps(sumi), acc);
    } else {
      out = tiled_step(out, d0, dmin0, y[i].d, hsum_epi32_avx2(sumi), s2, true);
    }
  }
  return order == Q8KOrder::kTiled ? out : hsum8_avx2(acc) + summs;
}

TROUPE_TARGET_AVX2 float dot_q6_k_avx2(const BlockQ6_K* x, const BlockQ8K* y, int64_t nb,
                                       Q8KOrder order) {
  __m256 acc = _mm256_setzero_ps();
  float out = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i sumi = q6_k_ints_avx2(x[i], y[i]);
    const float d0 = model::fp16_to_fp32(x[i].d);
    if (order == Q8KOrder::kVecDot) {
      acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * d0), _mm256_cvtepi32_ps(sumi), acc);
    } else {
      out = tiled_step(out, d0, 0.0f, y[i].d, hsum_epi32_avx2(sumi), 0, false);
    }
  }
  return order == Q8KOrder::kTiled ? out : hsum8_avx2(acc);
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
  const bool simd = TROUPE_X86 && isa != IsaLevel::kScalar;
  if (type == model::TensorType::kQ4_K) {
    const auto* w = static_cast<const BlockQ4_K*>(row);
#if TROUPE_X86
    if (simd) return dot_q4_k_avx2(w, x, nb, order);
#endif
    return dot_scalar(w, x, nb, order, q4_k_ints_scalar);
  }
  if (type == model::TensorType::kQ5_K) {
    const auto* w = static_cast<const BlockQ5_K*>(row);
#if TROUPE_X86
    if (simd) return dot_q5_k_avx2(w, x, nb, order);
#endif
    return dot_scalar(w, x, nb, order, q5_k_ints_scalar);
  }
  const auto* w = static_cast<const BlockQ6_K*>(row);
#if TROUPE_X86
  if (simd) return dot_q6_k_avx2(w, x, nb, order);
#endif
  (void)simd;
  return dot_scalar(w, x, nb, order, q6_k_ints_scalar);
}

void matmul_q8k_range(model::TensorType type, const uint8_t* w, size_t row_bytes,
                      int64_t num_inputs, const BlockQ8K* x, int64_t num_rows, float* y,
                      int64_t ldy, int64_t out_begin, int64_t out_end, IsaLevel isa,
                      const Q8KOrder* orders) {
  const int64_t blocks = num_inputs / kQ8KBlock;
  for (int64_t o = out_begin; o < out_end; ++o) {
    const uint8_t* row = w + static_cast<size_t>(o) * row_bytes;
    for (int64_t r = 0; r < num_rows; ++r) {
      const Q8KOrder order = orders != nullptr ? orders[r] : Q8KOrder::kVecDot;
      y[r * ldy + o] = dot_q8k(type, row, x + r * blocks, num_inputs, isa, order);
    }
  }
}

}  // namespace troupe::gpu::cpu
