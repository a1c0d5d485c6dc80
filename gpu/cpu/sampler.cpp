// Sampling chain (see sampler.hpp).
#include "gpu/cpu/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "gpu/cpu/cpu_features.hpp"
#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/token_mask.hpp"
#include "gpu/cpu/vec_math.hpp"

namespace troupe::gpu::cpu {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

int32_t argmax_scalar(std::span<const float> v) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(v.size()); ++i) {
    if (v[i] > v[best]) best = i;
  }
  return best;
}

#if TROUPE_X86
// The scalar loop's answer -- the first index holding the maximum -- in two vector passes:
// the maximum, then the first lane equal to it (+0 and -0 compare equal, as in the scalar
// loop, which keeps the first of them). A NaN anywhere makes the scalar loop's answer depend on
// where it sits, so such rows take the scalar loop.
TROUPE_TARGET_AVX2 int32_t argmax_avx2(const float* v, int32_t n) {
  __m256 mx = _mm256_set1_ps(-INFINITY);
  __m256 nan = _mm256_setzero_ps();
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(v + i);
    mx = _mm256_max_ps(mx, x);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  if (_mm256_movemask_ps(nan) != 0) return -1;
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mx);
  float m = -INFINITY;
  for (float x : lanes) m = x > m ? x : m;
  for (int32_t j = i; j < n; ++j) {
    if (v[j] != v[j]) return -1;
    m = v[j] > m ? v[j] : m;
  }
  const __m256 target = _mm256_set1_ps(m);
  for (i = 0; i + 8 <= n; i += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(v + i), target, _CMP_EQ_OQ));
    if (mask != 0) return i + __builtin_ctz(static_cast<unsigned>(mask));
  }
  for (; i < n; ++i) {
    if (v[i] == m) return i;
  }
  return 0;  // n == 0, or every value is -inf (index 0 holds the maximum)
}
#endif

// sum_i exp(v[i] - m) for the log-softmax of logprobs: ggml_expf (float, ~1 ulp) eight at a
// time with each block's sum added in double. A full-vocabulary pass per sampled token (262,144
// entries for Gemma 3): libm's double exp made it ~11% of a batch-16 decode step there.
double sum_exp_scalar(const float* v, int32_t n, float m) {
  double s = 0.0;
  for (int32_t i = 0; i < n; ++i) s += static_cast<double>(ggml_expf(v[i] - m));
  return s;
}

#if TROUPE_X86
TROUPE_TARGET_AVX2 double sum_exp_avx2(const float* v, int32_t n, float m) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = ggml_expf256(_mm256_sub_ps(_mm256_loadu_ps(v + i), vm));
    acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
  double s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) s += static_cast<double>(ggml_expf(v[i] - m));
  return s;
}
#endif

double sum_exp(std::span<const float> v, float m) {
#if TROUPE_X86
  static const bool simd = default_isa() != IsaLevel::kScalar;
  if (simd) return sum_exp_avx2(v.data(), static_cast<int32_t>(v.size()), m);
#endif
  return sum_exp_scalar(v.data(), static_cast<int32_t>(v.size()), m);
}

int32_t argmax(std::span<const float> v) {
#if TROUPE_X86
  static const bool simd = default_isa() != IsaLevel::kScalar;
  if (simd && !v.empty()) {
    const int32_t best = argmax_avx2(v.data(), static_cast<int32_t>(v.size()));
    if (best >= 0) return best;
  }
#endif
  return argmax_scalar(v);
}

// Orders ids by descending value, then ascending id.
struct ByValueDesc {
  const float* v;
  bool operator()(int32_t a, int32_t b) const { return v[a] > v[b] || (v[a] == v[b] && a < b); }
};

// Bias, then the end-of-generation mask (vLLM applies both before penalties and before the
// greedy/random split, so they move greedy argmax too). A bias on a masked id cannot revive it:
// the mask writes -inf last. Ids outside the row are skipped: admission rejects them, and a
// backend must not write out of bounds if one slips through.
void apply_bias_and_mask(std::span<float> z, const SamplingSlot& slot, int32_t ahead) {
  const int64_t n = static_cast<int64_t>(z.size());
  for (const model::LogitBias& b : slot.params.logit_bias) {
    if (b.token_id >= 0 && b.token_id < n) z[b.token_id] += b.bias;
  }
  if (!slot.masks_end_tokens(ahead)) return;
  for (int32_t id : slot.end_token_ids) {
    if (id >= 0 && id < n) z[id] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace

double sampling_uniform(uint64_t seed, int32_t num_generated) {
  const uint64_t r = splitmix64(splitmix64(seed) ^ splitmix64(0xD1B54A32D192ED03ull +
                                                              static_cast<uint64_t>(num_generated)));
  return static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0);
}

SampledToken Sampler::sample(std::span<const float> logits, const SamplingSlot& slot,
                             std::span<const int32_t> recent, std::span<const uint32_t> bitmask,
                             int32_t ahead) {
  const model::SamplingParams& p = slot.params;
  SampledToken out;
  // A constrained row never takes the in-place greedy path: the grammar's mask comes first.
  const bool adjusts = !p.logit_bias.empty() || slot.masks_end_tokens(ahead) || !bitmask.empty();
  if (p.greedy() && !adjusts) {
    out.token_id = argmax(logits);  // the common greedy case reads the row in place
  } else {
    work_.assign(logits.begin(), logits.end());
    if (!bitmask.empty()) apply_token_bitmask(work_, bitmask);
    apply_bias_and_mask(work_, slot, ahead);
    if (p.greedy()) {
      out.token_id = argmax(work_);
    } else {
      apply_penalties(p, recent);
      out.token_id = draw(slot, ahead);
    }
  }
  // From the raw row, before bias, mask and penalties: vLLM v1's default logprobs_mode
  // (raw_logprobs) computes them before any logits processor.
  if (p.logprobs || p.top_logprobs > 0) fill_logprobs(logits, p.top_logprobs, out);
  return out;
}

void Sampler::apply_penalties(const model::SamplingParams& p, std::span<const int32_t> recent) {
  const bool penalize = p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
                        p.frequency_penalty != 0.0f;
  if (!penalize || p.penalty_last_n == 0 || recent.empty()) return;
  float* z = work_.data();
  const int32_t n = static_cast<int32_t>(work_.size());
  size_t window = recent.size();
  if (p.penalty_last_n > 0) window = std::min(window, static_cast<size_t>(p.penalty_last_n));
  const auto w = recent.subspan(recent.size() - window);
  counts_.assign(n, 0);
  for (int32_t t : w) {
    if (t >= 0 && t < n) counts_[t]++;
  }
  for (int32_t t : w) {
    if (t < 0 || t >= n || counts_[t] == 0) continue;
    const int32_t c = counts_[t];
    counts_[t] = 0;  // apply once per distinct token
    if (p.repetition_penalty != 1.0f) {
      z[t] = z[t] <= 0.0f ? z[t] * p.repetition_penalty : z[t] / p.repetition_penalty;
    }
    z[t] -= static_cast<float>(c) * p.frequency_penalty + p.presence_penalty;
  }
}

int32_t Sampler::sample_verified(std::span<const float> logits, int64_t vocab,
                                 const SamplingSlot& slot,
                                 std::span<const int32_t> recent_with_drafts, int32_t recent_count,
                                 std::span<const uint32_t> bitmask,
                                 std::span<const int32_t> drafts, std::span<SampledToken> out) {
  const auto num_drafts = static_cast<int32_t>(drafts.size());
  for (int32_t i = 0; i <= num_drafts; ++i) {
    const auto row = logits.subspan(static_cast<size_t>(i * vocab), static_cast<size_t>(vocab));
    // Penalties see the drafts before this position as generated (they are, if we get here).
    const auto recent = recent_count > 0
                            ? recent_with_drafts.first(static_cast<size_t>(recent_count + i))
                            : std::span<const int32_t>{};
    out[static_cast<size_t>(i)] = sample(row, slot, recent, bitmask, i);
    if (i == num_drafts || out[static_cast<size_t>(i)].token_id != drafts[static_cast<size_t>(i)]) {
      return i + 1;
    }
  }
  return num_drafts + 1;  // not reached
}

int32_t Sampler::draw(const SamplingSlot& slot, int32_t ahead) {
  const model::SamplingParams& p = slot.params;
  const float* z = work_.data();
  const int32_t n = static_cast<int32_t>(work_.size());
  // Candidates, sorted by logit when a filter needs an order.
  ids_.resize(n);
  for (int32_t i = 0; i < n; ++i) ids_[i] = i;
  int32_t count = n;
  bool sorted = false;
  if (p.top_k > 0 && p.top_k < n) {
    std::partial_sort(ids_.begin(), ids_.begin() + p.top_k, ids_.end(), ByValueDesc{z});
    count = p.top_k;
    sorted = true;
  }
  // Probabilities (before temperature, as llama.cpp's top-p/min-p see them).
  float zmax = -std::numeric_limits<float>::infinity();
  for (int32_t i = 0; i < count; ++i) zmax = std::max(zmax, z[ids_[i]]);
  probs_.resize(n);
  double total = 0.0;
  for (int32_t i = 0; i < count; ++i) total += (probs_[ids_[i]] = std::exp(z[ids_[i]] - zmax));
  if (p.top_p < 1.0f) {
    if (!sorted) {
      // Grow a sorted prefix until it holds top_p of the mass (usually a few hundred ids).
      int32_t k = std::min(count, 256);
      for (;;) {
        std::partial_sort(ids_.begin(), ids_.begin() + k, ids_.begin() + count, ByValueDesc{z});
        double cum = 0.0;
        for (int32_t i = 0; i < k; ++i) cum += probs_[ids_[i]];
        if (cum >= p.top_p * total || k == count) break;
        k = std::min(count, k * 4);
      }
      sorted = true;
    }
    double cum = 0.0;
    int32_t keep = 0;
    while (keep < count) {
      cum += probs_[ids_[keep++]];
      if (cum >= p.top_p * total) break;
    }
    count = std::max(keep, 1);
  }
  if (p.min_p > 0.0f) {
    // probs are relative to the max (exp(0) = 1), so the threshold is min_p itself.
    int32_t kept = 0;
    for (int32_t i = 0; i < count; ++i) {
      if (probs_[ids_[i]] >= p.min_p) ids_[kept++] = ids_[i];
    }
    count = std::max(kept, 1);
  }
  // Temperature, then the draw over the survivors in their current order.
  const double inv_t = 1.0 / p.temperature;
  double sum = 0.0;
  for (int32_t i = 0; i < count; ++i) {
    sum += (probs_[ids_[i]] = static_cast<float>(std::exp((z[ids_[i]] - zmax) * inv_t)));
  }
  const double target = sampling_uniform(p.seed, slot.num_generated + ahead) * sum;
  double cum = 0.0;
  for (int32_t i = 0; i < count; ++i) {
    cum += probs_[ids_[i]];
    if (cum > target) return ids_[i];
  }
  return ids_[count - 1];
}

ScoredToken Sampler::score(std::span<const float> logits, int32_t token, int32_t top_n) {
  SampledToken scored;
  scored.token_id = token;
  fill_logprobs(logits, top_n, scored);
  const float mine = logits[static_cast<size_t>(token)];
  int32_t higher = 0;
  for (const float v : logits) higher += v > mine ? 1 : 0;
  ScoredToken out;
  out.token_id = token;
  out.logprob = scored.logprob;
  out.rank = 1 + higher;
  out.top_logprobs = std::move(scored.top_logprobs);
  return out;
}

void Sampler::fill_logprobs(std::span<const float> logits, int32_t top_logprobs,
                            SampledToken& out) {
  const int32_t n = static_cast<int32_t>(logits.size());
  float m = -std::numeric_limits<float>::infinity();
  for (float v : logits) m = std::max(m, v);
  const double lse = m + std::log(sum_exp(logits, m));
  out.logprob = static_cast<float>(logits[out.token_id] - lse);
  const int32_t k = std::min(top_logprobs, n);
  if (k <= 0) return;
  ids_.resize(n);
  for (int32_t i = 0; i < n; ++i) ids_[i] = i;
  std::partial_sort(ids_.begin(), ids_.begin() + k, ids_.end(), ByValueDesc{logits.data()});
  for (int32_t i = 0; i < k; ++i) {
    out.top_logprobs.push_back({ids_[i], static_cast<float>(logits[ids_[i]] - lse)});
  }
}

}  // namespace troupe::gpu::cpu
