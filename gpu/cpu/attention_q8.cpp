// Attention over a q8_0 KV cache (see attention_q8.hpp): the scalar twins (the reference order
// every AVX2 form in attention_q8_simd.cpp reproduces) and the driver that walks a run of query
// rows over the keys in chunks.
#include "gpu/cpu/attention_q8.hpp"

#include <algorithm>
#include <cmath>

#include "gpu/cpu/attention_q8_kernels.hpp"
#include "gpu/cpu/libm_expf.hpp"
#include "gpu/cpu/vec_math.hpp"
#include "model/fp16.hpp"
#include "model/quants/q4_q8.hpp"

namespace troupe::gpu::cpu {
namespace detail {
namespace {

constexpr int32_t kQk = kQ8Block;

void quantize_block_scalar(const float* x, BlockQ8_0& out) {
  float amax = 0.0f;
  for (int32_t i = 0; i < kQk; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  out.d = model::fp32_to_fp16(d);
  // round-half-even, as vroundps with _MM_ROUND_NEAREST (the default rounding mode here)
  for (int32_t i = 0; i < kQk; ++i) out.qs[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
}

// Lane j of 8 sums the block's products 4j..4j+3 (maddubs + madd) and takes fma(dx * dy, that,
// lane); then hsum8.
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

// ggml's dequantize_row_q8_0 (model/quants): float(q) * d per value.
void dequantize_scalar(const BlockQ8_0* x, int32_t blocks, float* out) {
  model::quants::dequantize_row_q8_0(x, int64_t{blocks} * kQk, out);
}

void scale_scalar(float* acc, int32_t n, float by) {
  for (int32_t i = 0; i < n; ++i) acc[i] *= by;
}

void mad_scalar(float* acc, const float* v, int32_t n, float by) {
  for (int32_t i = 0; i < n; ++i) acc[i] = std::fma(v[i], by, acc[i]);
}

void scores_scalar(const BlockQ8_0* const* rows, int32_t n, const BlockQ8_0* q, int32_t heads,
                   int32_t blocks, float scale, float* s, const Q8Ahead& /*ahead*/) {
  for (int32_t h = 0; h < heads; ++h) {
    for (int32_t i = 0; i < n; ++i) {
      s[h * kQ8KeyChunk + i] = dot_scalar(rows[i], q + static_cast<int64_t>(h) * blocks, blocks) * scale;
    }
  }
}

void dequantize_rows_scalar(const BlockQ8_0* const* rows, int32_t n, int32_t blocks, float* out) {
  for (int32_t i = 0; i < n; ++i) dequantize_scalar(rows[i], blocks, out + i * blocks * kQk);
}

// llama.cpp's online softmax, key by key: if s > m, ms = expf(m - s) and m = s, else
// vs = expf(s - m); sum = fma(sum, ms, vs) (its x86 build contracts S*ms + vs).
void softmax_scalar(float* const* states, int32_t items, const float* s, int32_t n, float* ms,
                    float* vs, bool* rescaled) {
  for (int32_t item = 0; item < items; ++item) {
    const float* si = s + item * kQ8KeyChunk;
    float* msi = ms + item * kQ8KeyChunk;
    float* vsi = vs + item * kQ8KeyChunk;
    float m = states[item][0];
    float sum = states[item][1];
    rescaled[item] = false;
    for (int32_t i = 0; i < n; ++i) {
      if (si[i] > m) {
        msi[i] = std::exp(m - si[i]);
        vsi[i] = 1.0f;
        m = si[i];
      } else {
        msi[i] = 1.0f;
        vsi[i] = std::exp(si[i] - m);
      }
      rescaled[item] = rescaled[item] || msi[i] != 1.0f;
      sum = std::fma(sum, msi[i], vsi[i]);
    }
    states[item][0] = m;
    states[item][1] = sum;
  }
}

// Where ms[i] != 1 acc *= ms[i] first (a factor of exactly 1 changes nothing, as llama.cpp's
// scale by 1 would not); then acc = fma(V_i, vs[i], acc). Each value's sequence is llama.cpp's.
void accumulate_scalar(float* const* acc, int32_t items, const float* values, int32_t n,
                       int32_t head_dim, const float* ms, const float* vs,
                       const bool* /*rescaled*/) {
  for (int32_t item = 0; item < items; ++item) {
    for (int32_t i = 0; i < n; ++i) {
      const float m = ms[item * kQ8KeyChunk + i];
      if (m != 1.0f) scale_scalar(acc[item], head_dim, m);
      mad_scalar(acc[item], values + static_cast<int64_t>(i) * head_dim, head_dim,
                 vs[item * kQ8KeyChunk + i]);
    }
  }
}

void accumulate_heads_scalar(float* const* acc, int32_t items, const BlockQ8_0* const* rows,
                             int32_t n, int32_t blocks, const float* ms, const float* vs,
                             const bool* /*rescaled*/) {
  float v[kQk];
  for (int32_t b = 0; b < blocks; ++b) {
    for (int32_t i = 0; i < n; ++i) {
      dequantize_scalar(rows[i] + b, 1, v);
      for (int32_t item = 0; item < items; ++item) {
        float* a = acc[item] + b * kQk;
        const float m = ms[item * kQ8KeyChunk + i];
        if (m != 1.0f) scale_scalar(a, kQk, m);
        mad_scalar(a, v, kQk, vs[item * kQ8KeyChunk + i]);
      }
    }
  }
}

// The K and V row pointers of keys [t0, t0 + n) of one KV head, a page's run at a time.
void find_rows(const KvLayerView& kv, const int32_t* block_table, int32_t kv_head, int32_t t0,
               int32_t n, const BlockQ8_0** k_rows, const BlockQ8_0** v_rows) {
  for (int32_t i = 0; i < n;) {
    const int32_t slot = (t0 + i) % kv.block_size;
    const int32_t run = std::min(kv.block_size - slot, n - i);
    const size_t at = kv.offset(block_table[(t0 + i) / kv.block_size], kv_head, slot);
    for (int32_t j = 0; j < run; ++j, ++i) {
      k_rows[i] = reinterpret_cast<const BlockQ8_0*>(kv.k + at + j * kv.row_words());
      v_rows[i] = reinterpret_cast<const BlockQ8_0*>(kv.v + at + j * kv.row_words());
    }
  }
}

// Every item's (item = row * heads + head) query quantized, and its state [maximum, sum,
// accumulator] cleared: -inf, 0, zeros.
void start_items(const Q8AttentionRows& rows, int32_t heads, int32_t head_dim,
                 Q8AttentionScratch& scratch, IsaLevel isa) {
  const int32_t items = rows.num_rows * heads;
  const int32_t blocks = head_dim / kQ8Block;
  const int64_t stride = 2 + head_dim;
  scratch.q.resize(static_cast<size_t>(items) * blocks);
  scratch.state.resize(static_cast<size_t>(items * stride));
  for (int32_t item = 0; item < items; ++item) {
    const int32_t r = item / heads, h = item % heads;
    quantize_q8_0(rows.q + r * rows.q_stride + static_cast<int64_t>(h) * head_dim, head_dim,
                  scratch.q.data() + static_cast<size_t>(item) * blocks, isa);
    float* state = scratch.state.data() + item * stride;
    state[0] = -INFINITY;
    state[1] = 0.0f;
    std::fill_n(state + 2, head_dim, 0.0f);
  }
}

// Every item's output: its accumulator over its sum (0 where no key was seen).
void finish_items(const Q8Kernels& k, const Q8AttentionRows& rows, int32_t heads,
                  int32_t head_dim, const Q8AttentionScratch& scratch) {
  const int64_t stride = 2 + head_dim;
  for (int32_t item = 0; item < rows.num_rows * heads; ++item) {
    const int32_t r = item / heads, h = item % heads;
    const float* state = scratch.state.data() + item * stride;
    float* out = rows.out + r * rows.out_stride + static_cast<int64_t>(h) * head_dim;
    const float inv = state[1] == 0.0f ? 0.0f : 1.0f / state[1];
    std::copy_n(state + 2, head_dim, out);
    k.scale(out, head_dim, inv);
  }
}

bool use_avx2(IsaLevel isa) { return TROUPE_X86 && isa != IsaLevel::kScalar; }

}  // namespace

const Q8Kernels& q8_scalar_kernels() {
  static const Q8Kernels k{quantize_block_scalar, dot_scalar,       scale_scalar,
                           scores_scalar,         dequantize_rows_scalar, softmax_scalar,
                           accumulate_scalar,     accumulate_heads_scalar};
  return k;
}

const Q8Kernels& q8_kernels(IsaLevel isa) {
  if (!use_avx2(isa)) return q8_scalar_kernels();
  // libm's expf in vector lanes only where it is this libm's (libm_expf.hpp).
  if (isa >= IsaLevel::kAvx512Vnni) {
    static const Q8Kernels wide = q8_avx512_kernels(libm_expf_x8_agrees());
    return wide;
  }
  static const Q8Kernels k = q8_avx2_kernels(libm_expf_x8_agrees());
  return k;
}

}  // namespace detail

using detail::kQ8KeyChunk;
using detail::kQ8MaxItems;

void quantize_q8_0(const float* x, int32_t n, BlockQ8_0* out, IsaLevel isa) {
  const detail::Q8Kernels& k = detail::q8_kernels(isa);
  for (int32_t b = 0; b < n / detail::kQ8Block; ++b) k.quantize(x + b * detail::kQ8Block, out[b]);
}

float dot_q8_0(const BlockQ8_0* x, const BlockQ8_0* y, int32_t blocks, IsaLevel isa) {
  return detail::q8_kernels(isa).dot(x, y, blocks);
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
  const detail::Q8Kernels& k = detail::q8_kernels(isa);
  const int32_t hd = kv.head_dim;
  const int32_t blocks = hd / detail::kQ8Block;
  const int32_t heads = std::min(rows.num_heads, kQ8MaxItems);
  if (rows.num_heads > heads) {  // more heads than one softmax call takes: in parts
    Q8AttentionRows part = rows;
    part.num_heads = rows.num_heads - heads;
    part.q = rows.q + static_cast<int64_t>(heads) * hd;
    part.out = rows.out + static_cast<int64_t>(heads) * hd;
    attention_q8_0(kv, block_table, kv_head, part, scratch, isa);
  }
  const int64_t stride = 2 + hd;  // a state: maximum, sum, accumulator
  auto first_key = [&](int32_t r) {
    const int32_t p = rows.first_position + r;
    return rows.window > 0 ? std::max(0, p + 1 - rows.window) : 0;
  };
  // A call's items: one row's heads, or the heads of the `group` rows that see a whole chunk.
  const int32_t group = std::min(rows.num_rows, std::max(1, kQ8MaxItems / heads));
  const int32_t call_items = group * heads;
  scratch.scores.resize(static_cast<size_t>(3 * call_items) * kQ8KeyChunk);  // s, ms, vs
  scratch.values.resize(static_cast<size_t>(kQ8KeyChunk) * hd);
  detail::start_items(rows, heads, hd, scratch, isa);
  float* s = scratch.scores.data();
  float* ms = s + call_items * kQ8KeyChunk;
  float* vs = ms + call_items * kQ8KeyChunk;
  float* states[kQ8MaxItems];
  float* acc[kQ8MaxItems];
  bool rescaled[kQ8MaxItems];
  // Row pointers of two chunks, [chunk][K or V][key]: this one, and the next one, which the
  // first scores call of this chunk prefetches (Q8Ahead).
  const BlockQ8_0* chunk_rows[2][2][kQ8KeyChunk];
  // Every key of [first_key(0), last position] is visible to some row (windows slide with the
  // rows), so each chunk's V rows are dequantized once for all of them.
  const int32_t end = rows.first_position + rows.num_rows;
  int32_t now = 0;
  detail::find_rows(kv, block_table, kv_head, first_key(0),
                    std::min(kQ8KeyChunk, end - first_key(0)), chunk_rows[now][0],
                    chunk_rows[now][1]);
  for (int32_t t0 = first_key(0); t0 < end; t0 += kQ8KeyChunk, now ^= 1) {
    const int32_t n = std::min(kQ8KeyChunk, end - t0);
    const BlockQ8_0** k_rows = chunk_rows[now][0];
    const BlockQ8_0** v_rows = chunk_rows[now][1];
    detail::Q8Ahead ahead{.k = chunk_rows[now ^ 1][0],
                          .v = chunk_rows[now ^ 1][1],
                          .n = std::min(kQ8KeyChunk, end - t0 - n)};
    if (ahead.n > 0) {
      detail::find_rows(kv, block_table, kv_head, t0 + n, ahead.n, chunk_rows[now ^ 1][0],
                        chunk_rows[now ^ 1][1]);
    }
    // Rows [r0, r0 + count) over keys [lo, hi) of this chunk: their items' scores, softmax and
    // value sums in one call each. A generated token (one row) accumulates its heads straight
    // from the q8_0 V rows; a prompt tile's rows from the chunk's V rows dequantized once.
    auto attend = [&](int32_t r0, int32_t count, int32_t lo, int32_t hi) {
      const int32_t call = count * heads;
      for (int32_t j = 0; j < call; ++j) {
        states[j] = scratch.state.data() + (r0 * heads + j) * stride;
        acc[j] = states[j] + 2;
      }
      k.scores(k_rows + (lo - t0), hi - lo,
               scratch.q.data() + static_cast<size_t>(r0) * heads * blocks, call, blocks,
               rows.scale, s, ahead);
      ahead.n = 0;  // asked once per chunk
      k.softmax(states, call, s, hi - lo, ms, vs, rescaled);
      if (rows.num_rows == 1) {
        k.accumulate_heads(acc, call, v_rows + (lo - t0), hi - lo, blocks, ms, vs, rescaled);
      } else {
        k.accumulate(acc, call, scratch.values.data() + static_cast<size_t>(lo - t0) * hd, hi - lo,
                     hd, ms, vs, rescaled);
      }
    };
    if (rows.num_rows > 1) k.dequantize_rows(v_rows, n, blocks, scratch.values.data());
    // Rows that see all of the chunk (its keys inside their windows) are taken `group` at a
    // time; the others (the causal diagonal, a window's edge) one by one, over their part.
    for (int32_t r = 0; r < rows.num_rows;) {
      const int32_t lo = std::max(t0, first_key(r));
      const int32_t hi = std::min(t0 + n, rows.first_position + r + 1);
      if (lo >= hi) {
        ++r;
        continue;
      }
      int32_t count = 1;
      if (lo == t0 && hi == t0 + n) {
        while (count < group && r + count < rows.num_rows && first_key(r + count) <= t0) ++count;
      }
      attend(r, count, lo, hi);
      r += count;
    }
  }
  detail::finish_items(k, rows, heads, hd, scratch);
}

}  // namespace troupe::gpu::cpu
