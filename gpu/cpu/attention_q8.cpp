// Attention over a q8_0 KV cache (see attention_q8.hpp): the scalar twins, their AVX2 forms and
// the driver that walks a run of query rows over the keys in chunks.
#include "gpu/cpu/attention_q8.hpp"

#include <algorithm>
#include <cmath>

#include "gpu/cpu/attention_kernels.hpp"
#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/libm_expf.hpp"
#include "gpu/cpu/vec_math.hpp"
#include "model/fp16.hpp"

namespace troupe::gpu::cpu {
namespace {

constexpr int32_t kQk = model::quants::kBlockElements;
// Keys whose scores and dequantized V rows are computed before the rows' sequential updates
// read them: the scores of a chunk do not depend on the running state, so their dot products
// (and the update's expf calls, whose arguments are then known) do not wait on each other.
constexpr int32_t kKeyChunk = 32;
// Query heads per KV head in one call (GQA groups are 1-8 in the models served; a run of
// heads is cut to at most this by the caller's head runs).
constexpr int32_t kMaxQ8Heads = 64;

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

// Chunk-level forms (what the driver calls): rows[i] is key i's q8_0 row.
void scores_scalar(const BlockQ8_0* const* rows, int32_t n, const BlockQ8_0* q, int32_t blocks,
                   float scale, float* s) {
  for (int32_t i = 0; i < n; ++i) s[i] = dot_scalar(rows[i], q, blocks) * scale;
}

void dequantize_rows_scalar(const BlockQ8_0* const* rows, int32_t n, int32_t blocks, float* out) {
  for (int32_t i = 0; i < n; ++i) dequantize_scalar(rows[i], blocks, out + i * blocks * kQk);
}

// acc (head_dim values) over n keys: where ms[i] != 1 (a new maximum) acc *= ms[i] first (a
// factor of exactly 1 changes nothing, as llama.cpp's scale by 1 would not); then
// acc = fma(V_i, vs[i], acc). Each value's sequence is llama.cpp's.
void accumulate_scalar(float* acc, const float* values, int32_t n, int32_t head_dim,
                       const float* ms, const float* vs) {
  for (int32_t i = 0; i < n; ++i) {
    if (ms[i] != 1.0f) scale_scalar(acc, head_dim, ms[i]);
    mad_scalar(acc, values + static_cast<int64_t>(i) * head_dim, head_dim, vs[i]);
  }
}

// A generated token's accumulators (one query row) for `heads` query heads at once, straight
// from the q8_0 V rows: each value dequantized as dequantize_scalar does, then every head's
// rescale and fma in accumulate_scalar's order. acc[h] is head h's head_dim values; ms and vs
// are [heads][kKeyChunk].
void accumulate_heads_scalar(float* const* acc, int32_t heads, const BlockQ8_0* const* rows,
                             int32_t n, int32_t blocks, const float* ms, const float* vs) {
  float v[kQk];
  for (int32_t b = 0; b < blocks; ++b) {
    for (int32_t i = 0; i < n; ++i) {
      dequantize_scalar(rows[i] + b, 1, v);
      for (int32_t h = 0; h < heads; ++h) {
        float* a = acc[h] + b * kQk;
        if (ms[h * kKeyChunk + i] != 1.0f) scale_scalar(a, kQk, ms[h * kKeyChunk + i]);
        mad_scalar(a, v, kQk, vs[h * kKeyChunk + i]);
      }
    }
  }
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
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(x[b].d) * _cvtsh_ss(y[b].d));
    acc = _mm256_fmadd_ps(d, products_avx2(x[b].qs, y[b].qs), acc);
  }
  return hsum8_avx2(acc);
}

// n % 8 == 0 (n is head_dim, a multiple of 32 here).
TROUPE_TARGET_AVX2 void scale_avx2(float* acc, int32_t n, float by) {
  const __m256 b = _mm256_set1_ps(by);
  for (int32_t i = 0; i < n; i += 8) _mm256_storeu_ps(acc + i, _mm256_mul_ps(_mm256_loadu_ps(acc + i), b));
}

// dot_avx2 for up to 8 keys at once: their lane sums reduced together (hsum8_x8 gives each one
// hsum8's order), then scaled.
TROUPE_TARGET_AVX2 void scores_avx2(const BlockQ8_0* const* rows, int32_t n, const BlockQ8_0* q,
                                    int32_t blocks, float scale, float* s) {
  const __m256 by = _mm256_set1_ps(scale);
  for (int32_t i0 = 0; i0 < n; i0 += 8) {
    const int32_t m = std::min(8, n - i0);
    __m256 acc[8];
    for (int32_t j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
    for (int32_t b = 0; b < blocks; ++b) {
      const float dq = _cvtsh_ss(q[b].d);
      for (int32_t j = 0; j < m; ++j) {
        const BlockQ8_0& x = rows[i0 + j][b];
        acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(x.d) * dq), products_avx2(x.qs, q[b].qs),
                                 acc[j]);
      }
    }
    float out[8];
    _mm256_storeu_ps(out, _mm256_mul_ps(detail::hsum8_x8(acc), by));
    std::copy_n(out, m, s + i0);
  }
}

TROUPE_TARGET_AVX2 void dequantize_rows_avx2(const BlockQ8_0* const* rows, int32_t n,
                                             int32_t blocks, float* out) {
  for (int32_t i = 0; i < n; ++i) {
    const BlockQ8_0* x = rows[i];
    for (int32_t b = 0; b < blocks; ++b) {
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(x[b].d));
      float* o = out + (static_cast<int64_t>(i) * blocks + b) * kQk;
      for (int32_t j = 0; j < kQk; j += 8) {
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[b].qs + j));
        _mm256_storeu_ps(o + j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
      }
    }
  }
}

// accumulate_scalar's order, 64 values (8 registers) at a time across all n keys: each value
// sees the same multiplies and fmas in the same key order.
TROUPE_TARGET_AVX2 void accumulate_avx2(float* acc, const float* values, int32_t n,
                                        int32_t head_dim, const float* ms, const float* vs) {
  for (int32_t c = 0; c < head_dim; c += 64) {
    __m256 a[8];
    for (int j = 0; j < 8; ++j) a[j] = _mm256_loadu_ps(acc + c + 8 * j);
    for (int32_t i = 0; i < n; ++i) {
      if (ms[i] != 1.0f) {
        const __m256 m = _mm256_set1_ps(ms[i]);
        for (int j = 0; j < 8; ++j) a[j] = _mm256_mul_ps(a[j], m);
      }
      const __m256 v = _mm256_set1_ps(vs[i]);
      const float* row = values + static_cast<int64_t>(i) * head_dim + c;
      for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(row + 8 * j), v, a[j]);
    }
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(acc + c + 8 * j, a[j]);
  }
}
#endif

// llama.cpp's online softmax over scores s[0, n), key by key: the running maximum m and sum, and
// each key's factors, ms (the accumulator's rescale, 1 unless s is a new maximum) and vs (its V
// row's weight). Only the scalar chain lives here; the accumulator's work (accumulate) takes the
// factors after, and the expf calls, whose arguments do not wait on each other, overlap.
void softmax_factors_scalar(float* state, const float* s, int32_t n, float* ms, float* vs) {
  float m = state[0];
  float sum = state[1];
  for (int32_t i = 0; i < n; ++i) {
    if (s[i] > m) {
      ms[i] = std::exp(m - s[i]);
      vs[i] = 1.0f;
      m = s[i];
    } else {
      ms[i] = 1.0f;
      vs[i] = std::exp(s[i] - m);
    }
    sum = std::fma(sum, ms[i], vs[i]);
  }
  state[0] = m;
  state[1] = sum;
}

#if TROUPE_X86
// softmax_factors_scalar's values: the maxima and expf arguments first (the scalar chain of
// compares), then every expf eight at a time in libm's own arithmetic (libm_expf.hpp), then the
// sum's fma chain.
TROUPE_TARGET_AVX2 void softmax_factors_avx2(float* state, const float* s, int32_t n, float* ms,
                                             float* vs) {
  alignas(32) float arg[kKeyChunk];
  alignas(32) float e[kKeyChunk];
  bool new_max[kKeyChunk];
  float m = state[0];
  for (int32_t i = 0; i < n; ++i) {
    new_max[i] = s[i] > m;
    arg[i] = new_max[i] ? m - s[i] : s[i] - m;
    if (new_max[i]) m = s[i];
  }
  for (int32_t i = n; i < (n + 7) / 8 * 8; ++i) arg[i] = 0.0f;
  for (int32_t i = 0; i < n; i += 8) _mm256_store_ps(e + i, libm_expf_x8_avx2(_mm256_load_ps(arg + i)));
  __m128 sum = _mm_set_ss(state[1]);
  for (int32_t i = 0; i < n; ++i) {
    ms[i] = new_max[i] ? e[i] : 1.0f;
    vs[i] = new_max[i] ? 1.0f : e[i];
    sum = _mm_fmadd_ss(sum, _mm_set_ss(ms[i]), _mm_set_ss(vs[i]));
  }
  state[0] = m;
  state[1] = _mm_cvtss_f32(sum);
}

// accumulate_heads_scalar's order with each 32-value block of up to three heads' accumulators
// in registers across the chunk's keys: a V block is dequantized once for all of them.
TROUPE_TARGET_AVX2 void accumulate_heads_avx2(float* const* acc, int32_t heads,
                                              const BlockQ8_0* const* rows, int32_t n,
                                              int32_t blocks, const float* ms, const float* vs) {
  for (int32_t h0 = 0; h0 < heads; h0 += 3) {
    const int32_t hn = std::min<int32_t>(3, heads - h0);
    for (int32_t b = 0; b < blocks; ++b) {
      __m256 a[3][4];
      for (int32_t h = 0; h < hn; ++h) {
        for (int j = 0; j < 4; ++j) a[h][j] = _mm256_loadu_ps(acc[h0 + h] + b * kQk + 8 * j);
      }
      for (int32_t i = 0; i < n; ++i) {
        const BlockQ8_0& x = rows[i][b];
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(x.d));
        __m256 v[4];
        for (int j = 0; j < 4; ++j) {
          const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x.qs + 8 * j));
          v[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
        }
        for (int32_t h = 0; h < hn; ++h) {
          const float m = ms[(h0 + h) * kKeyChunk + i];
          if (m != 1.0f) {
            const __m256 mm = _mm256_set1_ps(m);
            for (int j = 0; j < 4; ++j) a[h][j] = _mm256_mul_ps(a[h][j], mm);
          }
          const __m256 w = _mm256_set1_ps(vs[(h0 + h) * kKeyChunk + i]);
          for (int j = 0; j < 4; ++j) a[h][j] = _mm256_fmadd_ps(v[j], w, a[h][j]);
        }
      }
      for (int32_t h = 0; h < hn; ++h) {
        for (int j = 0; j < 4; ++j) _mm256_storeu_ps(acc[h0 + h] + b * kQk + 8 * j, a[h][j]);
      }
    }
  }
}
#endif

bool use_avx2(IsaLevel isa) { return TROUPE_X86 && isa != IsaLevel::kScalar; }

// The kernels of one isa, chosen once per call.
struct Kernels {
  void (*quantize)(const float*, BlockQ8_0&);
  float (*dot)(const BlockQ8_0*, const BlockQ8_0*, int32_t);
  void (*scale)(float*, int32_t, float);
  void (*scores)(const BlockQ8_0* const*, int32_t, const BlockQ8_0*, int32_t, float, float*);
  void (*dequantize_rows)(const BlockQ8_0* const*, int32_t, int32_t, float*);
  void (*accumulate)(float*, const float*, int32_t, int32_t, const float*, const float*);
  void (*softmax_factors)(float*, const float*, int32_t, float*, float*);
  void (*accumulate_heads)(float* const*, int32_t, const BlockQ8_0* const*, int32_t, int32_t,
                           const float*, const float*);
};

Kernels kernels_for(IsaLevel isa) {
#if TROUPE_X86
  if (use_avx2(isa)) {
    // libm's expf in vector lanes only where it is this libm's (libm_expf.hpp).
    static const bool vector_expf = libm_expf_x8_agrees();
    return {quantize_block_avx2,  dot_avx2,        scale_avx2,
            scores_avx2,          dequantize_rows_avx2, accumulate_avx2,
            vector_expf ? softmax_factors_avx2 : softmax_factors_scalar,
            accumulate_heads_avx2};
  }
#endif
  (void)isa;
  return {quantize_block_scalar, dot_scalar,          scale_scalar,
          scores_scalar,         dequantize_rows_scalar, accumulate_scalar,
          softmax_factors_scalar, accumulate_heads_scalar};
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
  // Scores, then each item's ms and vs factors (one row: every head's, for accumulate_heads).
  const bool one_row = rows.num_rows == 1 && heads <= kMaxQ8Heads;
  const int32_t factor_sets = one_row ? heads : 1;
  scratch.scores.resize(static_cast<size_t>(1 + 2 * factor_sets) * kKeyChunk);
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
  float* s = scratch.scores.data();
  float* ms = s + kKeyChunk;
  float* vs = ms + static_cast<ptrdiff_t>(factor_sets) * kKeyChunk;
  const BlockQ8_0* k_rows[kKeyChunk];
  const BlockQ8_0* v_rows[kKeyChunk];
  // Every key of [first_key(0), last position] is visible to some row (windows slide with the
  // rows), so each chunk's V rows are dequantized once for all of them.
  const int32_t end = rows.first_position + rows.num_rows;
  const size_t row_bytes = kv.row_words() * sizeof(uint16_t);
  for (int32_t t0 = first_key(0); t0 < end; t0 += kKeyChunk) {
    const int32_t n = std::min(kKeyChunk, end - t0);
    for (int32_t i = 0; i < n; ++i) {
      const size_t at = kv.offset(block_table[(t0 + i) / kv.block_size], kv_head,
                                  (t0 + i) % kv.block_size);
      k_rows[i] = reinterpret_cast<const BlockQ8_0*>(kv.k + at);
      v_rows[i] = reinterpret_cast<const BlockQ8_0*>(kv.v + at);
    }
    // The next chunk's K and V rows toward L2 while this one computes: a decode step reads the
    // whole context once, from pages scattered by the block table.
    for (int32_t t = t0 + kKeyChunk; t < std::min(end, t0 + 2 * kKeyChunk); ++t) {
      const size_t at = kv.offset(block_table[t / kv.block_size], kv_head, t % kv.block_size);
      for (size_t line = 0; line < row_bytes; line += 64) {
        __builtin_prefetch(reinterpret_cast<const char*>(kv.k + at) + line, 0, 2);
        __builtin_prefetch(reinterpret_cast<const char*>(kv.v + at) + line, 0, 2);
      }
    }
    if (one_row) {
      // A generated token: its heads' factors first, then their accumulators together, from
      // the V rows as they are (each V block dequantized once, in registers).
      const int32_t lo = std::max(t0, first_key(0));
      const int32_t hi = std::min(t0 + n, rows.first_position + 1);
      float* acc[kMaxQ8Heads];
      for (int32_t h = 0; h < heads; ++h) {
        float* state = scratch.state.data() + h * stride;
        k.scores(k_rows + (lo - t0), hi - lo, scratch.q.data() + static_cast<size_t>(h) * blocks,
                 blocks, rows.scale, s);
        k.softmax_factors(state, s, hi - lo, ms + h * kKeyChunk, vs + h * kKeyChunk);
        acc[h] = state + 2;
      }
      k.accumulate_heads(acc, heads, v_rows + (lo - t0), hi - lo, blocks, ms, vs);
      continue;
    }
    k.dequantize_rows(v_rows, n, blocks, scratch.values.data());
    for (int32_t r = 0; r < rows.num_rows; ++r) {
      const int32_t lo = std::max(t0, first_key(r));
      const int32_t hi = std::min(t0 + n, rows.first_position + r + 1);
      if (lo >= hi) continue;
      for (int32_t h = 0; h < heads; ++h) {
        const int32_t item = r * heads + h;
        float* state = scratch.state.data() + item * stride;
        k.scores(k_rows + (lo - t0), hi - lo, scratch.q.data() + static_cast<size_t>(item) * blocks,
                 blocks, rows.scale, s);
        k.softmax_factors(state, s, hi - lo, ms, vs);
        k.accumulate(state + 2, scratch.values.data() + static_cast<size_t>(lo - t0) * hd, hi - lo,
                     hd, ms, vs);
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
