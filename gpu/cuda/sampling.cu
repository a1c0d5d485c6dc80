// Device sampling (see sampling.cuh). The kernel's helpers carry the CPU sampler's step names
// (gpu/cpu/sampler.cpp): apply_bias_and_mask, apply_penalties, argmax, draw and fill_logprobs;
// draw_in_rank_order and draw_in_id_order are the two walks of the CPU's draw (over its sorted
// candidates when top-k or top-p sorted them, in id order otherwise).
#include "gpu/cuda/sampling.cuh"

#include <climits>

#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/device_util.cuh"
#include "gpu/cuda/token_mask.cuh"

namespace troupe::gpu::cuda {
namespace {

constexpr int kThreads = 512;

// The CPU's sampling_uniform (gpu/cpu/sampler.cpp), bit for bit.
__device__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__device__ double sampling_uniform(uint64_t seed, int32_t num_generated) {
  const uint64_t r = splitmix64(splitmix64(seed) ^
                                splitmix64(0xD1B54A32D192ED03ull + static_cast<uint64_t>(num_generated)));
  return static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0);
}

__device__ __forceinline__ float key_value(unsigned int key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}

// A prefix of the rank order: ids with a larger key, or an equal key and a smaller id.
struct Cut {
  unsigned int key;
  int32_t id_end;
};

__device__ __forceinline__ bool in_cut(unsigned int key, int32_t id, Cut c) {
  return key > c.key || (key == c.key && id < c.id_end);
}

// Shared scratch for the block reductions.
struct Scratch {
  float f[32];
  int32_t i[32];
  unsigned long long u[32];
  int32_t found;
  float tile_total;
};

template <typename T, typename F>
__device__ T sum_over(int32_t n, F f, T* scratch) {
  T acc = 0;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) acc += f(i);
  return detail::block_sum(acc, scratch);
}

// Largest key K with measure(ids of key >= K) passing `enough` (measure decreasing in K, and
// enough(measure(0)) true). 32 block passes.
template <typename Measure, typename Enough>
__device__ unsigned int largest_key(Measure measure, Enough enough) {
  unsigned long long lo = 0, hi = 0xFFFFFFFFull;
  while (lo < hi) {
    const unsigned long long mid = lo + (hi - lo + 1) / 2;
    if (enough(measure(static_cast<unsigned int>(mid)))) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return static_cast<unsigned int>(lo);
}

// Smallest id_end in [1, n] with count(ids < id_end among `tie`) >= need.
template <typename Tie>
__device__ int32_t id_end_for(int32_t n, int32_t need, Tie tie, Scratch& s) {
  int32_t lo = 1, hi = n;
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo) / 2;
    const int32_t c = sum_over<int32_t>(mid, [&](int32_t i) { return tie(i) ? 1 : 0; }, s.i);
    if (c >= need) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// Keeps the first k ids (rank order) of `cut`.
__device__ Cut top_k_cut(const float* z, int32_t n, Cut cut, int32_t k, Scratch& s) {
  auto count_ge = [&](unsigned int key) {
    return sum_over<int32_t>(n, [&](int32_t i) {
      const unsigned int ki = detail::ordered_key(z[i]);
      return (in_cut(ki, i, cut) && ki >= key) ? 1 : 0;
    }, s.i);
  };
  const unsigned int K = largest_key(count_ge, [&](int32_t c) { return c >= k; });
  const int32_t greater = K == 0xFFFFFFFFu ? 0 : count_ge(K + 1);
  const int32_t id_end = id_end_for(n, k - greater, [&](int32_t i) {
    const unsigned int ki = detail::ordered_key(z[i]);
    return ki == K && in_cut(ki, i, cut);
  }, s);
  return Cut{K, id_end};
}

// Keeps the shortest rank-order prefix of `cut` whose probability mass (exp(z - zmax)) reaches
// top_p of the cut's mass, as the CPU's cumulative walk does.
__device__ Cut top_p_cut(const float* z, int32_t n, Cut cut, float zmax, float top_p, Scratch& s) {
  auto mass_ge = [&](unsigned int key) {
    return sum_over<float>(n, [&](int32_t i) {
      const unsigned int ki = detail::ordered_key(z[i]);
      return (in_cut(ki, i, cut) && ki >= key) ? expf(z[i] - zmax) : 0.0f;
    }, s.f);
  };
  const float target = top_p * mass_ge(0);
  const unsigned int K = largest_key(mass_ge, [&](float m) { return m >= target; });
  const float greater = K == 0xFFFFFFFFu ? 0.0f : mass_ge(K + 1);
  auto tie = [&](int32_t i) {
    const unsigned int ki = detail::ordered_key(z[i]);
    return ki == K && in_cut(ki, i, cut);
  };
  const int32_t ties = sum_over<int32_t>(n, [&](int32_t i) { return tie(i) ? 1 : 0; }, s.i);
  const float p_tie = expf(key_value(K) - zmax);
  int32_t need = static_cast<int32_t>(ceilf((target - greater) / p_tie));
  need = need < 1 ? 1 : (need > ties ? ties : need);
  return Cut{K, id_end_for(n, need, tie, s)};
}

__device__ void apply_penalties(float* z, int32_t n, const SamplingRowParams& p,
                                const int32_t* recent) {
  const bool penalize = p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
                        p.frequency_penalty != 0.0f;
  if (!penalize || p.penalty_last_n == 0 || p.recent_count == 0) return;
  int32_t window = p.recent_count;
  if (p.penalty_last_n > 0 && p.penalty_last_n < window) window = p.penalty_last_n;
  const int32_t* w = recent + p.recent_offset + (p.recent_count - window);
  // The thread at a token's first occurrence applies its penalty once, with its count.
  for (int32_t j = threadIdx.x; j < window; j += blockDim.x) {
    const int32_t t = w[j];
    if (t < 0 || t >= n) continue;
    bool first = true;
    for (int32_t i = 0; i < j && first; ++i) first = w[i] != t;
    if (!first) continue;
    int32_t count = 0;
    for (int32_t i = j; i < window; ++i) count += w[i] == t;
    float v = z[t];
    if (p.repetition_penalty != 1.0f) v = v <= 0.0f ? v * p.repetition_penalty : v / p.repetition_penalty;
    z[t] = v - (static_cast<float>(count) * p.frequency_penalty + p.presence_penalty);
  }
}

// logit_bias, then -inf on the masked end ids (after a barrier: a biased id may be masked too,
// and the mask must win, as on the CPU). Ids outside the row are skipped.
__device__ void apply_bias_and_mask(float* z, int32_t n, const SamplingRowParams& p,
                                    const SamplingArgs& a) {
  for (int32_t j = threadIdx.x; j < p.bias_count; j += blockDim.x) {
    const int32_t t = a.bias_ids[p.bias_offset + j];
    if (t >= 0 && t < n) z[t] += a.bias_values[p.bias_offset + j];
  }
  __syncthreads();
  for (int32_t j = threadIdx.x; j < p.end_count; j += blockDim.x) {
    const int32_t t = a.end_token_ids[p.end_offset + j];
    if (t >= 0 && t < n) z[t] = -INFINITY;
  }
  __syncthreads();
}

// Inclusive prefix sum of v over the block's threads (in thread order).
__device__ float block_inclusive_scan(float v, float* warp_totals) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const float o = __shfl_up_sync(0xFFFFFFFFu, v, offset);
    if (lane >= offset) v += o;
  }
  __syncthreads();
  if (lane == 31) warp_totals[warp] = v;
  __syncthreads();
  for (int w = 0; w < warp && w < num_warps; ++w) v += warp_totals[w];
  return v;
}

// Rank order (value descending, then id ascending) as one 64-bit key: a larger key ranks first.
__device__ __forceinline__ unsigned long long rank_composite(float v, int32_t i) {
  return (static_cast<unsigned long long>(detail::ordered_key(v)) << 32) |
         static_cast<unsigned long long>(0xFFFFFFFFu - static_cast<unsigned int>(i));
}

__device__ __forceinline__ int32_t id_of_rank_composite(unsigned long long c) {
  return static_cast<int32_t>(0xFFFFFFFFu - static_cast<unsigned int>(c & 0xFFFFFFFFull));
}

__device__ __forceinline__ float row_max(const float* v, int32_t n, Scratch& s) {
  float local_max = -INFINITY;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) local_max = fmaxf(local_max, v[i]);
  return detail::block_max(local_max, s.f);
}

// Greedy: the first id holding the largest value (the CPU's argmax).
__device__ __forceinline__ int32_t argmax(const float* v, int32_t n, Scratch& s) {
  unsigned long long best = 0;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    const unsigned long long c = rank_composite(v[i], i);
    best = c > best ? c : best;
  }
  return id_of_rank_composite(detail::block_max_u64(best, s.u));
}

// top-k, then top-p: both keep a prefix of the rank order. `sorted` says whether the CPU sorted
// its candidates (either filter on), and so whether the draw walks rank order or id order.
struct RankPrefix {
  Cut cut;
  bool sorted;
};

__device__ __forceinline__ RankPrefix cut_rank_prefix(const float* z, int32_t n,
                                                      const SamplingRowParams& p, float zmax,
                                                      Scratch& s) {
  Cut cut{0u, n};  // everything
  bool sorted = false;
  if (p.top_k > 0 && p.top_k < n) {
    cut = top_k_cut(z, n, cut, p.top_k, s);
    sorted = true;
  }
  if (p.top_p < 1.0f) {
    cut = p.top_p > 0.0f ? top_p_cut(z, n, cut, zmax, p.top_p, s) : top_k_cut(z, n, cut, 1, s);
    sorted = true;
  }
  return RankPrefix{cut, sorted};
}

// The survivors of top-k, top-p and min-p, and their weights after temperature. min-p
// (probabilities relative to the max, before temperature) keeps a rank prefix too, but as a
// predicate; min_p > 1 would keep nothing, and the CPU then keeps its first survivor.
struct Candidates {
  const float* z;
  int32_t n;
  Cut cut;
  float zmax;
  float min_p;  // clamped to 1
  float inv_t;  // 1 / temperature

  __device__ __forceinline__ bool contains(int32_t i) const {
    const unsigned int ki = detail::ordered_key(z[i]);
    return in_cut(ki, i, cut) && (min_p <= 0.0f || expf(z[i] - zmax) >= min_p);
  }
  __device__ __forceinline__ float weight(int32_t i) const {
    return contains(i) ? expf((z[i] - zmax) * inv_t) : 0.0f;
  }
};

enum class CandidateOrder { kRank, kId };

// The last candidate in `order`: the CPU's last survivor, its answer when rounding leaves the
// draw's target at or past the total.
__device__ __forceinline__ int32_t last_candidate(const Candidates& c, CandidateOrder order,
                                                  Scratch& s) {
  const bool rank_order = order == CandidateOrder::kRank;
  unsigned long long best = 0;
  for (int32_t i = threadIdx.x; i < c.n; i += blockDim.x) {
    if (!c.contains(i)) continue;
    const unsigned long long k =
        rank_order ? ~rank_composite(c.z[i], i) : static_cast<unsigned long long>(i);
    best = k > best ? k : best;
  }
  best = detail::block_max_u64(best, s.u);
  return rank_order ? id_of_rank_composite(~best) : static_cast<int32_t>(best);
}

// The draw over the candidates in rank order (as the CPU walks its sorted candidates): the
// first whose cumulative weight passes the target, found by bisection over keys (the weight of
// the candidates above a key) and then over ids among the candidates tied at the found key.
__device__ __forceinline__ int32_t draw_in_rank_order(const Candidates& c, float total,
                                                      float target, Scratch& s) {
  if (!(total > target)) return last_candidate(c, CandidateOrder::kRank, s);
  const float* z = c.z;
  const int32_t n = c.n;
  auto mass_ge = [&](unsigned int key) {
    return sum_over<float>(n, [&](int32_t i) {
      return detail::ordered_key(z[i]) >= key ? c.weight(i) : 0.0f;
    }, s.f);
  };
  const unsigned int K = largest_key(mass_ge, [&](float m) { return m > target; });
  const float greater = K == 0xFFFFFFFFu ? 0.0f : mass_ge(K + 1);
  auto tie = [&](int32_t i) { return detail::ordered_key(z[i]) == K && c.contains(i); };
  const int32_t ties = sum_over<int32_t>(n, [&](int32_t i) { return tie(i) ? 1 : 0; }, s.i);
  const float w_tie = expf((key_value(K) - c.zmax) * c.inv_t);
  int32_t j = static_cast<int32_t>(floorf((target - greater) / w_tie));
  j = j < 0 ? 0 : (j > ties - 1 ? ties - 1 : j);
  return id_end_for(n, j + 1, tie, s) - 1;
}

// The draw over the candidates in id order (the CPU's unsorted walk): the first candidate whose
// cumulative weight passes the target, one tile of blockDim.x ids at a time.
__device__ __forceinline__ int32_t draw_in_id_order(const Candidates& c, float target,
                                                    Scratch& s) {
  if (threadIdx.x == 0) s.found = INT_MAX;
  float running = 0.0f;
  for (int32_t base = 0; base < c.n; base += blockDim.x) {
    const int32_t i = base + threadIdx.x;
    const float w = i < c.n ? c.weight(i) : 0.0f;
    const float inclusive = block_inclusive_scan(w, s.f);
    if (threadIdx.x == blockDim.x - 1) s.tile_total = inclusive;
    if (w > 0.0f && running + inclusive > target) atomicMin(&s.found, i);
    __syncthreads();
    if (s.found != INT_MAX) break;
    running += s.tile_total;
    __syncthreads();  // the next tile rewrites tile_total and the warp totals
  }
  return s.found != INT_MAX ? s.found : last_candidate(c, CandidateOrder::kId, s);
}

// The penalized row z -> top-k -> top-p -> min-p -> temperature -> the seeded draw (the CPU's
// Sampler::draw).
__device__ __forceinline__ int32_t draw(const float* z, int32_t n, const SamplingRowParams& p,
                                        Scratch& s) {
  const float zmax = row_max(z, n, s);
  const RankPrefix prefix = cut_rank_prefix(z, n, p, zmax, s);
  const Candidates c{z, n, prefix.cut, zmax, p.min_p > 1.0f ? 1.0f : p.min_p, 1.0f / p.temperature};
  const float total = sum_over<float>(n, [&](int32_t i) { return c.weight(i); }, s.f);
  const float target = static_cast<float>(sampling_uniform(p.seed, p.num_generated) * total);
  return prefix.sorted ? draw_in_rank_order(c, total, target, s) : draw_in_id_order(c, target, s);
}

// The drawn token's logprob and the top alternatives (rank order), from the raw logits: before
// bias, mask and penalties, as on the CPU.
__device__ __forceinline__ void fill_logprobs(const float* logits, int32_t n, int32_t token,
                                              int32_t num_top_logprobs, const SamplingArgs& a,
                                              int32_t row, Scratch& s) {
  const float lmax = row_max(logits, n, s);
  const float sum = sum_over<float>(n, [&](int32_t i) { return expf(logits[i] - lmax); }, s.f);
  const float lse = lmax + logf(sum);
  if (threadIdx.x == 0) a.out_logprobs[row] = logits[token] - lse;
  unsigned long long previous = ~0ull;
  for (int32_t r = 0; r < num_top_logprobs && r < kMaxTopLogprobs && r < n; ++r) {
    unsigned long long best = 0;
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
      const unsigned long long c = rank_composite(logits[i], i);
      if (c < previous && c > best) best = c;
    }
    best = detail::block_max_u64(best, s.u);
    previous = best;
    const int32_t id = id_of_rank_composite(best);
    if (threadIdx.x == 0) {
      a.out_top_ids[static_cast<int64_t>(row) * kMaxTopLogprobs + r] = id;
      a.out_top_logprobs[static_cast<int64_t>(row) * kMaxTopLogprobs + r] = logits[id] - lse;
    }
  }
}

// One block per sampling row. Every helper is called by all the block's threads with
// block-uniform arguments (they synchronize through the block reductions); thread 0 writes.
__global__ void __launch_bounds__(kThreads) sample_rows_kernel(SamplingArgs a) {
  __shared__ Scratch s;
  const int32_t row = blockIdx.x, n = a.n_vocab;
  const SamplingRowParams p = a.params[row];
  const float* logits = a.logits + static_cast<int64_t>(row) * n;
  int32_t token = 0;

  // A constrained row's workspace already holds its masked copy (the token_mask kernel ran
  // first on the stream); like the CPU, it never takes the in-place greedy path.
  const bool masked = a.bitmask != nullptr && a.bitmask_rows[row] >= 0;
  const bool adjusts = masked || p.bias_count > 0 || p.end_count > 0;
  float* z = a.workspace + static_cast<int64_t>(row) * n;
  if (adjusts || p.temperature > 0.0f) {
    if (!masked) {
      for (int32_t i = threadIdx.x; i < n; i += blockDim.x) z[i] = logits[i];
    }
    __syncthreads();
    if (adjusts) apply_bias_and_mask(z, n, p, a);
  }
  if (p.temperature <= 0.0f) {
    token = argmax(adjusts ? z : logits, n, s);
  } else {
    apply_penalties(z, n, p, a.recent_tokens);
    __syncthreads();
    token = draw(z, n, p, s);
  }

  if (threadIdx.x == 0) a.out_tokens[row] = token;
  if (p.want_logprob == 0 && p.num_top_logprobs == 0) return;
  fill_logprobs(logits, n, token, p.num_top_logprobs, a, row, s);
}

void launch_sample_rows(const SamplingArgs& args, cudaStream_t stream) {
  if (args.num_rows == 0) return;
  if (args.bitmask != nullptr) {
    apply_token_bitmask(TokenMaskArgs{.in = args.logits, .out = args.workspace,
                                      .num_rows = args.num_rows, .n_vocab = args.n_vocab,
                                      .bitmask = args.bitmask,
                                      .num_words = args.bitmask_num_words,
                                      .bitmask_rows = args.bitmask_rows},
                        stream);
  }
  sample_rows_kernel<<<args.num_rows, kThreads, 0, stream>>>(args);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void sample_rows(const SamplingArgs& args, cudaStream_t stream) { launch_sample_rows(args, stream); }

}  // namespace troupe::gpu::cuda
