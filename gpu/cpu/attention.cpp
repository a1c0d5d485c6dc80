// Paged attention kernels (see attention.hpp).
#include "gpu/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gpu/cpu/attention_kernels.hpp"
#include "model/fp16.hpp"
#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/softmax.hpp"
#include "gpu/cpu/vec_math.hpp"

namespace troupe::gpu::cpu {
namespace {

constexpr int kMaxGroup = 16;
constexpr int kLanes = 8;  // ggml's (tinyBLAS's) AVX2 float lanes

// Scores s[g][t] = dot(q_g, k_t) * scale, each dot as llama.cpp's KQ product computes it on x86
// (tinyBLAS, F16 x F16): lane j accumulates dims j, j+8, ... by fma, then hsum8. q is already
// fp16-valued.
void scores_scalar(const KvLayerView& kv, const int32_t* table, int32_t n, int32_t kv_head,
                   const float* q, int32_t group, float scale, float* s) {
  const int32_t hd = kv.head_dim;
  for (int32_t t = 0; t < n; ++t) {
    const uint16_t* kp = kv.k + kv.offset(table[t / kv.block_size], kv_head, t % kv.block_size);
    for (int32_t g = 0; g < group; ++g) {
      const float* qg = q + static_cast<int64_t>(g) * hd;
      float acc[kLanes] = {};
      for (int32_t d = 0; d < hd; ++d) acc[d % kLanes] = std::fma(qg[d], model::fp16_to_fp32(kp[d]), acc[d % kLanes]);
      s[static_cast<int64_t>(g) * n + t] = hsum8(acc) * scale;
    }
  }
}

void weighted_values_scalar(const KvLayerView& kv, const int32_t* table, int32_t n,
                            int32_t kv_head, const float* p, int32_t group, float* out) {
  const int32_t hd = kv.head_dim;
  std::vector<float> acc(static_cast<size_t>(hd) * kLanes);
  for (int32_t g = 0; g < group; ++g) {
    const float* pg = p + static_cast<int64_t>(g) * n;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int32_t t = 0; t < n; ++t) {
      const uint16_t* vp = kv.v + kv.offset(table[t / kv.block_size], kv_head, t % kv.block_size);
      float* a = acc.data() + static_cast<size_t>(t % kLanes) * hd;
      for (int32_t d = 0; d < hd; ++d) a[d] = std::fma(pg[t], model::fp16_to_fp32(vp[d]), a[d]);
    }
    for (int32_t d = 0; d < hd; ++d) {
      float lanes[kLanes];
      for (int j = 0; j < kLanes; ++j) lanes[j] = acc[static_cast<size_t>(j) * hd + d];
      out[static_cast<int64_t>(g) * hd + d] = hsum8(lanes);
    }
  }
}

// ggml_vec_dot_f16's order on AVX2 (what llama.cpp's KQ and KQV products use for a one-token
// ubatch, where llamafile's sgemm declines): element i in accumulator (i % 32) / 8, lane i % 8;
// accumulators folded 0+2, 1+3, then 0+1; lanes as (l0+l4)+(l1+l5) + (l2+l6)+(l3+l7).
inline float reduce32(const float* a) {
  float x[8];
  for (int j = 0; j < 8; ++j) x[j] = (a[j] + a[16 + j]) + (a[8 + j] + a[24 + j]);
  const float t0 = x[0] + x[4], t1 = x[1] + x[5], t2 = x[2] + x[6], t3 = x[3] + x[7];
  return (t0 + t1) + (t2 + t3);
}

void scores_decode(const KvLayerView& kv, const int32_t* table, int32_t n, int32_t kv_head,
                   const float* q, int32_t group, float scale, float* s) {
  const int32_t hd = kv.head_dim;
  for (int32_t t = 0; t < n; ++t) {
    const uint16_t* kp = kv.k + kv.offset(table[t / kv.block_size], kv_head, t % kv.block_size);
    for (int32_t g = 0; g < group; ++g) {
      const float* qg = q + static_cast<int64_t>(g) * hd;
      float acc[32] = {};
      for (int32_t d = 0; d < hd; ++d) acc[d % 32] = std::fma(model::fp16_to_fp32(kp[d]), qg[d], acc[d % 32]);
      s[static_cast<int64_t>(g) * n + t] = reduce32(acc) * scale;
    }
  }
}

void weighted_values_decode(const KvLayerView& kv, const int32_t* table, int32_t n,
                            int32_t kv_head, const float* p, int32_t group, float* out) {
  const int32_t hd = kv.head_dim;
  std::vector<float> acc(static_cast<size_t>(hd) * 32);
  for (int32_t g = 0; g < group; ++g) {
    const float* pg = p + static_cast<int64_t>(g) * n;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int32_t t = 0; t < n; ++t) {
      const uint16_t* vp = kv.v + kv.offset(table[t / kv.block_size], kv_head, t % kv.block_size);
      float* a = acc.data() + static_cast<size_t>(t % 32);
      for (int32_t d = 0; d < hd; ++d) a[32 * d] = std::fma(model::fp16_to_fp32(vp[d]), pg[t], a[32 * d]);
    }
    for (int32_t d = 0; d < hd; ++d) out[static_cast<int64_t>(g) * hd + d] = reduce32(acc.data() + 32 * d);
  }
}

// ggml's soft_max over one row of scores (ggml_vec_soft_max_f32 on AVX2): e = ggml_expf(s -
// max); the sum in double of each 8-key block's hsum8 (keys past n are masked to 0 there);
// then p = e * float(1 / sum).
void softmax_row(float* s, int32_t n) {
  float mx = -INFINITY;
  for (int32_t t = 0; t < n; ++t) mx = s[t] > mx ? s[t] : mx;
  double sum = 0.0;
  for (int32_t t0 = 0; t0 < n; t0 += kLanes) {
    float block[kLanes] = {};
    for (int32_t j = 0; j < kLanes && t0 + j < n; ++j) block[j] = s[t0 + j] = ggml_expf(s[t0 + j] - mx);
    sum += static_cast<double>(hsum8(block));
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int32_t t = 0; t < n; ++t) s[t] *= inv;
}

}  // namespace

void detail::softmax_row_scalar(float* s, int32_t n, bool fp16_probabilities) {
  softmax_row(s, n);
  if (fp16_probabilities) {
    for (int32_t t = 0; t < n; ++t) s[t] = model::fp16_to_fp32(model::fp32_to_fp16(s[t]));
  }
}

void kv_store(const KvLayerView& kv, int32_t block, int32_t slot, const float* k, const float* v,
              IsaLevel isa) {
  for (int32_t h = 0; h < kv.num_kv_heads; ++h) {
    const int64_t at = static_cast<int64_t>(h) * kv.head_dim;
    store_fp16(k + at, kv.k + kv.offset(block, h, slot), kv.head_dim, isa);
    store_fp16(v + at, kv.v + kv.offset(block, h, slot), kv.head_dim, isa);
  }
}

namespace {

// The SIMD path: every step vectorized, bit-identical to the scalar one (attention_kernels.hpp).
bool attention_simd(const KvLayerView& kv, const int32_t* block_table, int32_t num_keys,
                    int32_t kv_head, const float* q, int32_t group, float scale, float* out,
                    float* scratch, IsaLevel isa, bool fp16_probabilities, bool single_token,
                    int32_t first_key) {
  const int32_t hd = kv.head_dim;
  if (!TROUPE_X86 || isa == IsaLevel::kScalar || hd % 8 != 0 || hd > detail::kMaxSimdHeadDim ||
      (single_token && hd % 32 != 0)) {
    return false;
  }
  // Row pointers of K and V for keys [0, num_keys), one block-table walk for both.
  thread_local std::vector<const uint16_t*> rows;
  if (rows.size() < 2 * static_cast<size_t>(num_keys)) rows.resize(2 * static_cast<size_t>(num_keys));
  const uint16_t** k_rows = rows.data();
  const uint16_t** v_rows = rows.data() + num_keys;
  for (int32_t t0 = 0; t0 < num_keys; t0 += kv.block_size) {
    const size_t base = kv.offset(block_table[t0 / kv.block_size], kv_head, 0);
    const int32_t count = std::min(kv.block_size, num_keys - t0);
    for (int32_t i = 0; i < count; ++i) {
      k_rows[t0 + i] = kv.k + base + static_cast<size_t>(i) * hd;
      v_rows[t0 + i] = kv.v + base + static_cast<size_t>(i) * hd;
    }
  }
  const bool avx512 = isa == IsaLevel::kAvx512Vnni && hd % 16 == 0;
  if (single_token && avx512) {
    detail::scores_decode_avx512(k_rows, v_rows, num_keys, hd, q, group, scale, scratch);
  } else if (single_token) {
    detail::scores_decode_avx2(k_rows, v_rows, num_keys, hd, q, group, scale, scratch);
  } else {
    detail::scores_chunk_avx2(k_rows, num_keys, hd, q, group, scale, scratch);
  }
  mask_keys_before(scratch, num_keys, group, first_key);
  if (avx512) {
    // The group's rows together: their double sums' dependent adds overlap.
    int32_t keys[kMaxGroup];
    for (int32_t g0 = 0; g0 < group; g0 += kMaxGroup) {
      const int32_t rows_now = std::min(kMaxGroup, group - g0);
      std::fill_n(keys, rows_now, num_keys);
      detail::softmax_rows_avx512({.num_rows = rows_now,
                                   .keys = keys,
                                   .s = scratch + static_cast<int64_t>(g0) * num_keys,
                                   .s_stride = num_keys},
                                  fp16_probabilities);
    }
  } else {
    for (int32_t g = 0; g < group; ++g) {
      detail::softmax_row_avx2(scratch + static_cast<int64_t>(g) * num_keys, num_keys,
                               fp16_probabilities);
    }
  }
  if (single_token && avx512) {
    detail::values_decode_avx512(v_rows, num_keys, hd, scratch, group, out);
  } else if (single_token) {
    detail::values_decode_avx2(v_rows, num_keys, hd, scratch, group, out);
  } else if (avx512) {
    detail::values_chunk_avx512(v_rows, num_keys, hd, scratch, group, out);
  } else {
    detail::values_chunk_avx2(v_rows, num_keys, hd, scratch, group, out);
  }
  return true;
}

}  // namespace

void attention_group(const KvLayerView& kv, const int32_t* block_table, int32_t num_keys,
                     int32_t kv_head, const float* q, int32_t group, float scale, float* out,
                     float* scratch, IsaLevel isa, bool fp16_probabilities, bool single_token,
                     int32_t first_key) {
  if (attention_simd(kv, block_table, num_keys, kv_head, q, group, scale, out, scratch, isa,
                     fp16_probabilities, single_token, first_key)) {
    return;
  }
  // The scalar path: the reference order every SIMD form must reproduce.
  if (single_token) {
    scores_decode(kv, block_table, num_keys, kv_head, q, group, scale, scratch);
  } else {
    scores_scalar(kv, block_table, num_keys, kv_head, q, group, scale, scratch);
  }
  mask_keys_before(scratch, num_keys, group, first_key);
  for (int32_t g = 0; g < group; ++g) {
    detail::softmax_row_scalar(scratch + static_cast<int64_t>(g) * num_keys, num_keys,
                               fp16_probabilities);
  }
  if (single_token) {
    weighted_values_decode(kv, block_table, num_keys, kv_head, scratch, group, out);
  } else {
    weighted_values_scalar(kv, block_table, num_keys, kv_head, scratch, group, out);
  }
}

void mask_keys_before(float* scores, int64_t stride, int32_t rows, int32_t first_key) {
  if (first_key <= 0) return;
  for (int32_t r = 0; r < rows; ++r) std::fill_n(scores + r * stride, first_key, -INFINITY);
}

void attention_group_reference(const KvLayerView& kv, const int32_t* block_table,
                               int32_t num_keys, int32_t kv_head, const float* q, int32_t group,
                               float scale, float* out, int32_t first_key) {
  const int32_t hd = kv.head_dim;
  std::vector<double> s(num_keys);
  for (int32_t g = 0; g < group; ++g) {
    const float* qg = q + static_cast<int64_t>(g) * hd;
    double mx = -1e300;
    for (int32_t t = first_key; t < num_keys; ++t) {
      const uint16_t* kp =
          kv.k + kv.offset(block_table[t / kv.block_size], kv_head, t % kv.block_size);
      double acc = 0.0;
      for (int32_t d = 0; d < hd; ++d) acc += static_cast<double>(qg[d]) * model::fp16_to_fp32(kp[d]);
      s[t] = acc * scale;
      mx = std::max(mx, s[t]);
    }
    double sum = 0.0;
    for (int32_t t = first_key; t < num_keys; ++t) sum += (s[t] = std::exp(s[t] - mx));
    for (int32_t d = 0; d < hd; ++d) {
      double acc = 0.0;
      for (int32_t t = first_key; t < num_keys; ++t) {
        const uint16_t* vp =
            kv.v + kv.offset(block_table[t / kv.block_size], kv_head, t % kv.block_size);
        acc += s[t] * model::fp16_to_fp32(vp[d]);
      }
      out[static_cast<int64_t>(g) * hd + d] = static_cast<float>(acc / sum);
    }
  }
}

}  // namespace troupe::gpu::cpu
