// Paged attention (see attention.cuh).
#include "gpu/cuda/attention.cuh"

#include <stdexcept>
#include <string>

#include <cuda_fp8.h>

#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/device_util.cuh"

namespace troupe::gpu::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxGroup = 8;

template <int kDimsPerLane>
__device__ __forceinline__ void load_kv(const __half* p, float* out) {
  if constexpr (kDimsPerLane % 2 == 0) {
    const __half2* p2 = reinterpret_cast<const __half2*>(p);
#pragma unroll
    for (int i = 0; i < kDimsPerLane / 2; ++i) {
      const float2 f = __half22float2(p2[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) out[i] = __half2float(p[i]);
  }
}

// E4M3 widens to fp16 exactly (3 mantissa bits, exponents inside fp16's range); the scales are
// applied to the score and the output, once, not to every element.
template <int kDimsPerLane>
__device__ __forceinline__ void load_kv(const __nv_fp8_storage_t* p, float* out) {
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    out[i] = __half2float(__half(__nv_cvt_fp8_to_halfraw(p[i], __NV_E4M3)));
  }
}

// One warp's online softmax over the keys it visited, per query head g of the group: the largest
// score m[g], the sum l[g] of exp(score - m), and acc[g], the sum of exp(score - m) * value over
// this lane's dims. Register arrays, indexed by unrolled constants only (no local-memory spill);
// the kernel owns them and this names them (separate arrays, not members, keep the kernel's
// machine code what it was before these helpers).
template <int kDimsPerLane>
struct OnlineSoftmax {
  float (&m)[kMaxGroup];
  float (&l)[kMaxGroup];
  float (&acc)[kMaxGroup][kDimsPerLane];
};

// Warp w visits keys first_key + w, first_key + w + kWarps, ... of [first_key, num_keys) through
// the sequence's block-table row
// and folds each into `state` for every query head of the group (KV head h). Element: the
// cache's (__half or E4M3 bytes); an fp16 cache's k_scale is 1, so its scores are unchanged.
template <int kDimsPerLane, typename Element>
__device__ __forceinline__ void attend_warp_keys(const AttentionArgs& a, int32_t h, int32_t group,
                                                 int32_t first_key, int32_t num_keys,
                                                 const int32_t* table,
                                                 const float (&q)[kMaxGroup][kDimsPerLane],
                                                 const OnlineSoftmax<kDimsPerLane>& state) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int32_t hd = a.head_dim;
  const int64_t head_stride = static_cast<int64_t>(a.block_size) * hd;
  const int64_t block_stride = head_stride * a.n_head_kv;
  const Element* k_cache = static_cast<const Element*>(a.k_cache);
  const Element* v_cache = static_cast<const Element*>(a.v_cache);
  const float score_scale = a.scale * a.k_scale;
  for (int32_t key = first_key + warp; key < num_keys; key += kWarps) {
    const int64_t block = table[key / a.block_size];
    const int64_t base = block * block_stride + h * head_stride +
                         static_cast<int64_t>(key % a.block_size) * hd + lane * kDimsPerLane;
    float kf[kDimsPerLane], vf[kDimsPerLane];
    load_kv<kDimsPerLane>(k_cache + base, kf);
    load_kv<kDimsPerLane>(v_cache + base, vf);
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g >= group) break;  // uniform across the block
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) dot = fmaf(q[g][i], kf[i], dot);
      const float s = detail::warp_sum(dot) * score_scale;
      const float m_new = fmaxf(state.m[g], s);
      const float correction = expf(state.m[g] - m_new);  // 0 on the first key (m = -inf)
      const float p = expf(s - m_new);
      state.l[g] = state.l[g] * correction + p;
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) {
        state.acc[g][i] = fmaf(p, vf[i], state.acc[g][i] * correction);
      }
      state.m[g] = m_new;
    }
  }
}

// Each warp's state goes to its slots of `partials`: [kWarps][kMaxGroup][head_dim + 2] (m, l, acc).
template <int kDimsPerLane>
__device__ __forceinline__ void store_warp_partials(const OnlineSoftmax<kDimsPerLane>& state,
                                                    int32_t group, int32_t hd, float* partials) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int32_t stride = hd + 2;
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    if (g >= group) break;
    float* slot = partials + (warp * kMaxGroup + g) * stride;
    if (lane == 0) {
      slot[0] = state.m[g];
      slot[1] = state.l[g];
    }
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) slot[2 + lane * kDimsPerLane + i] = state.acc[g][i];
  }
}

// Merges the warps' partials into the output rows of token t, query heads of KV head h: warp 0
// saw the first visible key, so the overall max is finite; warps without keys carry m = -inf and
// weigh 0.
__device__ __forceinline__ void merge_warp_partials(const AttentionArgs& a, const float* partials,
                                                    int32_t t, int32_t h, int32_t group) {
  const int32_t hd = a.head_dim;
  const int32_t stride = hd + 2;
  for (int32_t o = threadIdx.x; o < group * hd; o += blockDim.x) {
    const int32_t g = o / hd, d = o % hd;
    float m_all = -INFINITY;
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, partials[(w * kMaxGroup + g) * stride]);
    float l_all = 0.0f, o_all = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float* slot = partials + (w * kMaxGroup + g) * stride;
      const float weight = expf(slot[0] - m_all);
      l_all += slot[1] * weight;
      o_all += slot[2 + d] * weight;
    }
    const int64_t index =
        static_cast<int64_t>(t) * a.ld_out + (static_cast<int64_t>(h) * group + g) * hd + d;
    const float y = o_all / l_all * a.v_scale;  // exact for an fp16 cache (v_scale 1)
    if (a.out_f32) {
      static_cast<float*>(a.out)[index] = y;
    } else {
      detail::store_act(a.out, index, y, a.out_type);
    }
  }
}

// One block per (token t, KV head h). Lane l of every warp owns dims [l * kDimsPerLane,
// (l + 1) * kDimsPerLane) of each head.
template <int kDimsPerLane, typename Element>
__global__ void __launch_bounds__(kThreads) paged_attention_kernel(AttentionArgs a) {
  extern __shared__ float partials[];  // [kWarps][kMaxGroup][head_dim + 2]: m, l, acc
  const int32_t t = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x % 32;
  const int32_t group = a.n_head / a.n_head_kv;
  const int32_t hd = a.head_dim;
  const int32_t num_keys = a.positions[t] + 1;
  const int32_t first_key = a.sliding_window > 0 ? max(0, num_keys - a.sliding_window) : 0;
  const int32_t* table =
      a.block_tables + static_cast<int64_t>(a.token_table_row[t]) * a.max_blocks_per_seq;
  const float* q_row =
      a.q + static_cast<int64_t>(t) * a.ld_q + static_cast<int64_t>(h) * group * hd;

  float q[kMaxGroup][kDimsPerLane];
  float m[kMaxGroup], l[kMaxGroup], acc[kMaxGroup][kDimsPerLane];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      q[g][i] = g < group ? q_row[g * hd + lane * kDimsPerLane + i] : 0.0f;
      acc[g][i] = 0.0f;
    }
  }
  const OnlineSoftmax<kDimsPerLane> state{m, l, acc};

  attend_warp_keys<kDimsPerLane, Element>(a, h, group, first_key, num_keys, table, q, state);
  store_warp_partials<kDimsPerLane>(state, group, hd, partials);
  __syncthreads();
  merge_warp_partials(a, partials, t, h, group);
}

template <typename Element>
void launch_for_head_dim(const AttentionArgs& a, dim3 grid, size_t smem, cudaStream_t stream) {
  switch (a.head_dim) {
    case 32: paged_attention_kernel<1, Element><<<grid, kThreads, smem, stream>>>(a); break;
    case 64: paged_attention_kernel<2, Element><<<grid, kThreads, smem, stream>>>(a); break;
    case 96: paged_attention_kernel<3, Element><<<grid, kThreads, smem, stream>>>(a); break;
    case 128: paged_attention_kernel<4, Element><<<grid, kThreads, smem, stream>>>(a); break;
    case 256: paged_attention_kernel<8, Element><<<grid, kThreads, smem, stream>>>(a); break;
    default:
      throw std::invalid_argument("paged_attention: head_dim " + std::to_string(a.head_dim) +
                                  " is not supported (32, 64, 96, 128, 256)");
  }
}

void launch_paged_attention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.num_tokens == 0) return;
  if (a.n_head_kv <= 0 || a.n_head % a.n_head_kv != 0 || a.n_head / a.n_head_kv > kMaxGroup) {
    throw std::invalid_argument("paged_attention: n_head / n_head_kv must be an integer <= 8");
  }
  const dim3 grid(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>(a.n_head_kv));
  const size_t smem = sizeof(float) * kWarps * kMaxGroup * (a.head_dim + 2);
  if (a.element == KvElement::kFp8E4M3) {
    launch_for_head_dim<__nv_fp8_storage_t>(a, grid, smem, stream);
  } else {
    launch_for_head_dim<__half>(a, grid, smem, stream);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void paged_attention(const AttentionArgs& args, cudaStream_t stream) {
  launch_paged_attention(args, stream);
}

}  // namespace troupe::gpu::cuda
