// Paged attention kernels (see attention.hpp).
#include "gpu/cpu/attention.hpp"

#include <cmath>
#include <vector>

#include "gpu/cpu/fp16.hpp"
#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/softmax.hpp"
#include "gpu/cpu/vec_math.hpp"

namespace troupe::gpu::cpu {
namespace {

constexpr int kMaxGroup = 16;

#if TROUPE_X86
TROUPE_TARGET_AVX512 void scores_avx512(const KvLayerView& kv, const int32_t* table, int32_t n,
                                        int32_t kv_head, const float* q, int32_t group,
                                        float scale, float* s) {
  const int32_t hd = kv.head_dim;
  const int32_t nc = hd / 16;
  for (int32_t t = 0; t < n; ++t) {
    const uint16_t* kp = kv.k + kv.offset(table[t / kv.block_size], kv_head, t % kv.block_size);
    for (int32_t g = 0; g < group; ++g) {
      const float* qg = q + static_cast<int64_t>(g) * hd;
      __m512 acc = _mm512_setzero_ps();
      for (int32_t c = 0; c < nc; ++c) {
        const __m512 k = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kp + 16 * c)));
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(qg + 16 * c), k, acc);
      }
      s[static_cast<int64_t>(g) * n + t] = _mm512_reduce_add_ps(acc) * scale;
    }
  }
}

TROUPE_TARGET_AVX512 void weighted_values_avx512(const KvLayerView& kv, const int32_t* table,
                                                 int32_t n, int32_t kv_head, const float* p,
                                                 int32_t group, const float* inv_sum, float* out) {
  const int32_t hd = kv.head_dim;
  for (int32_t c = 0; c < hd / 16; ++c) {
    __m512 acc[kMaxGroup];
    for (int32_t g = 0; g < group; ++g) acc[g] = _mm512_setzero_ps();
    for (int32_t t = 0; t < n; ++t) {
      const uint16_t* vp =
          kv.v + kv.offset(table[t / kv.block_size], kv_head, t % kv.block_size) + 16 * c;
      const __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(vp)));
      for (int32_t g = 0; g < group; ++g) {
        acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(p[static_cast<int64_t>(g) * n + t]), v, acc[g]);
      }
    }
    for (int32_t g = 0; g < group; ++g) {
      _mm512_storeu_ps(out + static_cast<int64_t>(g) * hd + 16 * c,
                       _mm512_mul_ps(acc[g], _mm512_set1_ps(inv_sum[g])));
    }
  }
}
#endif

void scores_scalar(const KvLayerView& kv, const int32_t* table, int32_t n, int32_t kv_head,
                   const float* q, int32_t group, float scale, float* s) {
  const int32_t hd = kv.head_dim;
  for (int32_t t = 0; t < n; ++t) {
    const uint16_t* kp = kv.k + kv.offset(table[t / kv.block_size], kv_head, t % kv.block_size);
    for (int32_t g = 0; g < group; ++g) {
      const float* qg = q + static_cast<int64_t>(g) * hd;
      float acc = 0.0f;
      for (int32_t d = 0; d < hd; ++d) acc = std::fma(qg[d], fp16_to_fp32(kp[d]), acc);
      s[static_cast<int64_t>(g) * n + t] = acc * scale;
    }
  }
}

void weighted_values_scalar(const KvLayerView& kv, const int32_t* table, int32_t n,
                            int32_t kv_head, const float* p, int32_t group, const float* inv_sum,
                            float* out) {
  const int32_t hd = kv.head_dim;
  for (int32_t g = 0; g < group; ++g) {
    float* o = out + static_cast<int64_t>(g) * hd;
    for (int32_t d = 0; d < hd; ++d) o[d] = 0.0f;
    for (int32_t t = 0; t < n; ++t) {
      const uint16_t* vp = kv.v + kv.offset(table[t / kv.block_size], kv_head, t % kv.block_size);
      const float pt = p[static_cast<int64_t>(g) * n + t];
      for (int32_t d = 0; d < hd; ++d) o[d] = std::fma(pt, fp16_to_fp32(vp[d]), o[d]);
    }
    for (int32_t d = 0; d < hd; ++d) o[d] *= inv_sum[g];
  }
}

}  // namespace

void kv_store(const KvLayerView& kv, int32_t block, int32_t slot, const float* k, const float* v) {
  for (int32_t h = 0; h < kv.num_kv_heads; ++h) {
    uint16_t* kd = kv.k + kv.offset(block, h, slot);
    uint16_t* vd = kv.v + kv.offset(block, h, slot);
    const float* ks = k + static_cast<int64_t>(h) * kv.head_dim;
    const float* vs = v + static_cast<int64_t>(h) * kv.head_dim;
    for (int32_t d = 0; d < kv.head_dim; ++d) {
      kd[d] = fp32_to_fp16(ks[d]);
      vd[d] = fp32_to_fp16(vs[d]);
    }
  }
}

void attention_group(const KvLayerView& kv, const int32_t* block_table, int32_t num_keys,
                     int32_t kv_head, const float* q, int32_t group, float scale, float* out,
                     float* scratch, IsaLevel isa, bool fp16_probabilities) {
  const bool simd = isa == IsaLevel::kAvx512Vnni && kv.head_dim % 16 == 0 && group <= kMaxGroup;
#if TROUPE_X86
  if (simd) {
    scores_avx512(kv, block_table, num_keys, kv_head, q, group, scale, scratch);
  } else
#endif
  {
    scores_scalar(kv, block_table, num_keys, kv_head, q, group, scale, scratch);
  }
  float inv_sum[kMaxGroup * 4] = {};
  std::vector<float> inv_heap;
  float* inv = inv_sum;
  if (group > kMaxGroup * 4) {
    inv_heap.resize(group);
    inv = inv_heap.data();
  }
  for (int32_t g = 0; g < group; ++g) {
    float* sg = scratch + static_cast<int64_t>(g) * num_keys;
    const float sum = exp_shifted(sg, num_keys, max_value(sg, num_keys), simd ? isa : IsaLevel::kScalar);
    inv[g] = 1.0f / sum;
    if (fp16_probabilities) {
      for (int32_t t = 0; t < num_keys; ++t) sg[t] = fp16_to_fp32(fp32_to_fp16(sg[t] * inv[g]));
      inv[g] = 1.0f;
    }
  }
#if TROUPE_X86
  if (simd) {
    weighted_values_avx512(kv, block_table, num_keys, kv_head, scratch, group, inv, out);
    return;
  }
#endif
  weighted_values_scalar(kv, block_table, num_keys, kv_head, scratch, group, inv, out);
}

void attention_group_reference(const KvLayerView& kv, const int32_t* block_table,
                               int32_t num_keys, int32_t kv_head, const float* q, int32_t group,
                               float scale, float* out) {
  const int32_t hd = kv.head_dim;
  std::vector<double> s(num_keys);
  for (int32_t g = 0; g < group; ++g) {
    const float* qg = q + static_cast<int64_t>(g) * hd;
    double mx = -1e300;
    for (int32_t t = 0; t < num_keys; ++t) {
      const uint16_t* kp =
          kv.k + kv.offset(block_table[t / kv.block_size], kv_head, t % kv.block_size);
      double acc = 0.0;
      for (int32_t d = 0; d < hd; ++d) acc += static_cast<double>(qg[d]) * fp16_to_fp32(kp[d]);
      s[t] = acc * scale;
      mx = std::max(mx, s[t]);
    }
    double sum = 0.0;
    for (int32_t t = 0; t < num_keys; ++t) sum += (s[t] = std::exp(s[t] - mx));
    for (int32_t d = 0; d < hd; ++d) {
      double acc = 0.0;
      for (int32_t t = 0; t < num_keys; ++t) {
        const uint16_t* vp =
            kv.v + kv.offset(block_table[t / kv.block_size], kv_head, t % kv.block_size);
        acc += s[t] * fp16_to_fp32(vp[d]);
      }
      out[static_cast<int64_t>(g) * hd + d] = static_cast<float>(acc / sum);
    }
  }
}

}  // namespace troupe::gpu::cpu
