// Attention over a q8_0 KV cache (see attention_q8.hpp): the scalar twins, their AVX2 forms and
// the driver that walks a run of query rows over the keys in chunks.
#include "gpu/cpu/attention_q8.hpp"

#include <algorithm>
#include <cmath>

#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/vec_math.hpp"
#include "model/fp16.hpp"

namespace troupe::gpu::cpu {
namespace {

constexpr int32_t kQk = model::quants::kBlockElements;
// Keys whose scores and dequantized V rows are computed before the rows' sequential updates
// read them: the scores of a chunk do not depend on the running state, so their dot products
// (and the update's expf calls, whose arguments are then known) do not wait on each other.
constexpr int32_t kKeyChunk = 32;

// ---- scalar twins: the reference order ---------------------------------------------------

void quantize_block_scalar(const float* x, BlockQ8_0& out) {
  float amax = 0.0f;
  for (int32_t i = 0; i < kQk; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  out.d = model::fp32_to_fp16(d);
  // round-half-even, as vroundps with _MM_ROUND_NEAREST (the default rounding mode here)
  for (int32_t i = 0; i < kQk; ++i) out.qs[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
}

float dot_scalar(const BlockQ8_0* x, const BlockQ8_0* y, int32_t blocks) {
  float acc[8] = {};
  for (int32_t b = 0; b < blocks; ++b) {
    const float d = model::fp16_to_fp32(x[b].d) * model::fp16_to_fp32(y[b].d);
    for (int32_t lane = 0; lane < 8; ++lane) {
      int32_t sum = 0;
      for (int32_t j = 4 * lane; j < 4 * lane + 4; ++j) sum += x[b].qs[j] * y[b].qs[j];
      acc[lane] = std::fma(d, static_cast<float>(sum), acc[lane]);
    }
  }
  return hsum8(acc);
}

void dequantize_scalar(const BlockQ8_0* x, int32_t blocks, float* out) {
  for (int32_t b = 0; b < blocks; ++b) {
    const float d = model::fp16_to_fp32(x[b].d);
    for (int32_t j = 0; j < kQk; ++j) out[b * kQk + j] = static_cast<float>(x[b].qs[j]) * d;
  }
}

void scale_scalar(float* acc, int32_t n, float by) {
  for (int32_t i = 0; i < n; ++i) acc[i] *= by;
}

void mad_scalar(float* acc, const float* v, int32_t n, float by) {
  for (int32_t i = 0; i < n; ++i) acc[i] = std::fma(v[i], by, acc[i]);
}

// ---- AVX2: the same operations, eight values at a time ----------------------------------

#if TROUPE_X86
// round-half-even(v * mul) as int32.
TROUPE_TARGET_AVX2 inline __m256i scaled_ints(__m256 v, __m256 mul) {
  return _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v, mul), _MM_ROUND_NEAREST));
}

TROUPE_TARGET_AVX2 void quantize_block_avx2(const float* x, BlockQ8_0& out) {
  __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
  __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_andnot_ps(sign, v0);
  amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v1));
  amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v2));
  amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v3));
  __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float m = _mm_cvtss_f32(m4);
  out.d = model::fp32_to_fp16(m / 127.0f);
  const __m256 mul = _mm256_set1_ps(m != 0.0f ? 127.0f / m : 0.0f);
  const __m256i i01 = _mm256_packs_epi32(scaled_ints(v0, mul), scaled_ints(v1, mul));
  const __m256i i23 = _mm256_packs_epi32(scaled_ints(v2, mul), scaled_ints(v3, mul));
  const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(i01, i23),
                                                    _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.qs), bytes);
}

// Lane j: float(x[4j]y[4j] + ... + x[4j+3]y[4j+3]), as ggml's mul_sum_i8_pairs_float.
TROUPE_TARGET_AVX2 inline __m256 products_avx2(const int8_t* x, const int8_t* y) {
  const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y));
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

TROUPE_TARGET_AVX2 float dot_avx2(const BlockQ8_0* x, const BlockQ8_0* y, int32_t blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int32_t b = 0; b < blocks; ++b) {
    const __m256 d = _mm256_set1_ps(model::fp16_to_fp32(x[b].d) * model::fp16_to_fp32(y[b].d));
    acc = _mm256_fmadd_ps(d, products_avx2(x[b].qs, y[b].qs), acc);
  }
  return hsum8_avx2(acc);
}

TROUPE_TARGET_AVX2 void dequantize_avx2(const BlockQ8_0* x, int32_t blocks, float* out) {
  for (int32_t b = 0; b < blocks; ++b) {
    const __m256 d = _mm256_set1_ps(model::fp16_to_fp32(x[b].d));
    for (int32_t j = 0; j < kQk; j += 8) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[b].qs + j));
      _mm256_storeu_ps(out + b * kQk + j,
                       _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
    }
  }
}

// n % 8 == 0 (n is head_dim, a multiple of 32 here).
TROUPE_TARGET_AVX2 void scale_avx2(float* acc, int32_t n, float by) {
  const __m256 b = _mm256_set1_ps(by);
  for (int32_t i = 0; i < n; i += 8) _mm256_storeu_ps(acc + i, _mm256_mul_ps(_mm256_loadu_ps(acc + i), b));
}

TROUPE_TARGET_AVX2 void mad_avx2(float* acc, const float* v, int32_t n, float by) {
  const __m256 b = _mm256_set1_ps(by);
  for (int32_t i = 0; i < n; i += 8) {
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(_mm256_loadu_ps(v + i), b, _mm256_loadu_ps(acc + i)));
  }
}
#endif

bool use_avx2(IsaLevel isa) { return TROUPE_X86 && isa != IsaLevel::kScalar; }

// The kernels of one isa, chosen once per call.
struct Kernels {
  void (*quantize)(const float*, BlockQ8_0&);
  float (*dot)(const BlockQ8_0*, const BlockQ8_0*, int32_t);
  void (*dequantize)(const BlockQ8_0*, int32_t, float*);
  void (*scale)(float*, int32_t, float);
  void (*mad)(float*, const float*, int32_t, float);
};

Kernels kernels_for(IsaLevel isa) {
#if TROUPE_X86
  if (use_avx2(isa)) return {quantize_block_avx2, dot_avx2, dequantize_avx2, scale_avx2, mad_avx2};
#endif
  (void)isa;
  return {quantize_block_scalar, dot_scalar, dequantize_scalar, scale_scalar, mad_scalar};
}

const BlockQ8_0* row_at(const uint16_t* base, const KvLayerView& kv, const int32_t* table,
                        int32_t kv_head, int32_t t) {
  return reinterpret_cast<const BlockQ8_0*>(
      base + kv.offset(table[t / kv.block_size], kv_head, t % kv.block_size));
}

// One query row's running state over keys [t0, t0 + n) whose scores are s[0, n) and whose V
// rows are values[0, n): llama.cpp's online softmax, key by key.
void update(float* state, const float* s, const float* values, int32_t n, int32_t head_dim,
            const Kernels& k) {
  float m = state[0];
  float sum = state[1];
  float* acc = state + 2;
  for (int32_t i = 0; i < n; ++i) {
    float ms = 1.0f;
    float vs = 1.0f;
    if (s[i] > m) {
      const float old = m;
      m = s[i];
      ms = std::exp(old - m);
      k.scale(acc, head_dim, ms);
    } else {
      vs = std::exp(s[i] - m);
    }
    k.mad(acc, values + static_cast<int64_t>(i) * head_dim, head_dim, vs);
    sum = std::fma(sum, ms, vs);
  }
  state[0] = m;
  state[1] = sum;
}

}  // namespace

void quantize_q8_0(const float* x, int32_t n, BlockQ8_0* out, IsaLevel isa) {
  const Kernels k = kernels_for(isa);
  for (int32_t b = 0; b < n / kQk; ++b) k.quantize(x + b * kQk, out[b]);
}

float dot_q8_0(const BlockQ8_0* x, const BlockQ8_0* y, int32_t blocks, IsaLevel isa) {
  return kernels_for(isa).dot(x, y, blocks);
}

void kv_store_q8_0(const KvLayerView& kv, int32_t block, int32_t slot, const float* k,
                   const float* v, IsaLevel isa) {
  for (int32_t h = 0; h < kv.num_kv_heads; ++h) {
    const int64_t at = static_cast<int64_t>(h) * kv.head_dim;
    const size_t row = kv.offset(block, h, slot);
    quantize_q8_0(k + at, kv.head_dim, reinterpret_cast<BlockQ8_0*>(kv.k + row), isa);
    quantize_q8_0(v + at, kv.head_dim, reinterpret_cast<BlockQ8_0*>(kv.v + row), isa);
  }
}

void attention_q8_0(const KvLayerView& kv, const int32_t* block_table, int32_t kv_head,
                    const Q8AttentionRows& rows, Q8AttentionScratch& scratch, IsaLevel isa) {
  const Kernels k = kernels_for(isa);
  const int32_t hd = kv.head_dim;
  const int32_t blocks = hd / kQk;
  const int32_t heads = rows.num_heads;
  const int32_t items = rows.num_rows * heads;  // item = row * heads + head
  const int64_t stride = 2 + hd;
  auto first_key = [&](int32_t r) {
    const int32_t p = rows.first_position + r;
    return rows.window > 0 ? std::max(0, p + 1 - rows.window) : 0;
  };
  scratch.q.resize(static_cast<size_t>(items) * blocks);
  scratch.state.resize(static_cast<size_t>(items) * stride);
  scratch.scores.resize(static_cast<size_t>(items) * kKeyChunk);
  scratch.values.resize(static_cast<size_t>(kKeyChunk) * hd);
  for (int32_t r = 0; r < rows.num_rows; ++r) {
    for (int32_t h = 0; h < heads; ++h) {
      const int32_t item = r * heads + h;
      quantize_q8_0(rows.q + r * rows.q_stride + static_cast<int64_t>(h) * hd, hd,
                    scratch.q.data() + static_cast<size_t>(item) * blocks, isa);
      float* state = scratch.state.data() + item * stride;
      state[0] = -INFINITY;
      state[1] = 0.0f;
      std::fill_n(state + 2, hd, 0.0f);
    }
  }
  // Every key of [first_key(0), last position] is visible to some row (windows slide with the
  // rows), so each chunk's V rows are dequantized once for all of them.
  const int32_t end = rows.first_position + rows.num_rows;
  for (int32_t t0 = first_key(0); t0 < end; t0 += kKeyChunk) {
    const int32_t n = std::min(kKeyChunk, end - t0);
    for (int32_t i = 0; i < n; ++i) {
      k.dequantize(row_at(kv.v, kv, block_table, kv_head, t0 + i), blocks,
                   scratch.values.data() + static_cast<size_t>(i) * hd);
    }
    for (int32_t r = 0; r < rows.num_rows; ++r) {
      const int32_t lo = std::max(t0, first_key(r));
      const int32_t hi = std::min(t0 + n, rows.first_position + r + 1);
      if (lo >= hi) continue;
      for (int32_t h = 0; h < heads; ++h) {
        const int32_t item = r * heads + h;
        float* s = scratch.scores.data() + static_cast<size_t>(item) * kKeyChunk;
        const BlockQ8_0* q = scratch.q.data() + static_cast<size_t>(item) * blocks;
        for (int32_t t = lo; t < hi; ++t) {
          s[t - lo] = k.dot(row_at(kv.k, kv, block_table, kv_head, t), q, blocks) * rows.scale;
        }
        update(scratch.state.data() + item * stride, s,
               scratch.values.data() + static_cast<size_t>(lo - t0) * hd, hi - lo, hd, k);
      }
    }
  }
  for (int32_t r = 0; r < rows.num_rows; ++r) {
    for (int32_t h = 0; h < heads; ++h) {
      float* state = scratch.state.data() + (r * heads + h) * stride;
      float* out = rows.out + r * rows.out_stride + static_cast<int64_t>(h) * hd;
      const float inv = state[1] == 0.0f ? 0.0f : 1.0f / state[1];
      std::copy_n(state + 2, hd, out);
      k.scale(out, hd, inv);
    }
  }
}

}  // namespace troupe::gpu::cpu
