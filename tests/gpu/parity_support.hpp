// Logit parity between two backends, shared by the CUDA tests (GPU against the CPU reference)
// and the CPU tests that measure a weight type's own noise (CPU on the model against CPU on the
// same model decoded to F16, model/dequantized_weights.hpp): the same teacher-forced schedule on
// both, the CPU reference's greedy tokens fed to both, every step's logits compared.
//
// A backend here is anything with compute_logits(const StepBatch&) -> logits of the sampling
// rows and model_config(): CpuBackend and CudaBackend both are.
//
// Thread-safety: test code, one thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/backend.hpp"
#include "gpu/step.hpp"
#include "tests/gpu/cpu_step_harness.hpp"

namespace troupe::gpu::testing {

inline std::vector<int32_t> random_tokens(int n, uint32_t seed, int vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

inline int32_t argmax(const float* v, int n) {
  return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

// ||got - want|| / ||want|| over whole logit vectors; infinite when `got` has a NaN.
inline double logits_relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / (den > 0.0 ? den : 1.0));
}

struct ParityTally {
  int rows = 0, exact = 0, near_ties = 0, mismatches = 0;
  double worst_row_rms = 0.0;        // worst per-row RMS logit difference
  double worst_step_relative = 0.0;  // worst per-step relative error of the whole logits
  std::string first_mismatch;        // where greedy disagreed beyond a near-tie
};

// Greedy on every sampling row: a disagreement is a near-tie (counted, allowed) when the
// reference's margin between the two tokens is within 3x the row's RMS logit difference.
inline void compare_greedy_rows(const std::vector<float>& want, const std::vector<float>& got,
                                int V, ParityTally& tally, const std::string& where) {
  for (size_t r = 0; (r + 1) * V <= want.size() && (r + 1) * V <= got.size(); ++r) {
    const float* w = &want[r * V];
    const float* g = &got[r * V];
    double err = 0.0;
    for (int i = 0; i < V; ++i) {
      const double d = std::isnan(g[i]) ? INFINITY : static_cast<double>(g[i]) - w[i];
      err += d * d;
    }
    err = std::sqrt(err / V);
    tally.worst_row_rms = std::max(tally.worst_row_rms, err);
    const int32_t wt = argmax(w, V), gt = argmax(g, V);
    ++tally.rows;
    if (wt == gt) {
      ++tally.exact;
    } else if (static_cast<double>(w[wt]) - w[gt] <= 3.0 * err) {
      ++tally.near_ties;
    } else {
      if (tally.mismatches++ == 0) {
        tally.first_mismatch = where + " row " + std::to_string(r) + ": picked " +
                               std::to_string(gt) + " where the reference picks " +
                               std::to_string(wt) + " (margin " + std::to_string(w[wt] - w[gt]) +
                               ", row RMS difference " + std::to_string(err) + ")";
      }
    }
  }
}

// Runs `prompts` in chunks of `chunk` then `decode_steps` teacher-forced decode steps on both
// backends (tokens: the reference's argmax) and compares every step. With KV groups (a
// sliding-window model) both harnesses hold the reference's groups and free the pages that fall
// out of the window, as the scheduler does.
template <typename Reference, typename Other>
ParityTally run_teacher_forced(Reference& reference, Other& other,
                               const std::vector<std::vector<int32_t>>& prompts, int chunk,
                               int decode_steps, int32_t num_blocks) {
  cpu::testing::StepHarness hr(num_blocks, 16), ho(num_blocks, 16);
  const KvCacheGeometry geometry = reference.kv_geometry();
  hr.set_kv_groups(geometry.num_kv_groups, geometry.sliding_window);
  ho.set_kv_groups(geometry.num_kv_groups, geometry.sliding_window);
  for (size_t i = 0; i < prompts.size(); ++i) {
    hr.add(i, prompts[i]);
    ho.add(i, prompts[i]);
  }
  const int V = reference.model_config().n_vocab;
  ParityTally tally;
  for (int step = 0;; ++step) {
    std::vector<std::pair<uint64_t, int32_t>> work;
    bool decoding_done = true;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto& s = hr.seq(i);
      const int32_t left = static_cast<int32_t>(s.tokens.size()) - s.computed;
      if (s.num_generated < decode_steps) decoding_done = false;
      if (s.num_generated >= decode_steps && left == 0) continue;
      work.push_back({i, std::min(left, chunk)});
    }
    if (decoding_done || work.empty()) break;
    const StepBatch br = hr.build(work);
    const StepBatch bo = ho.build(work);
    const std::vector<float> lr = reference.compute_logits(br);
    const std::vector<float> lo = other.compute_logits(bo);
    tally.worst_step_relative = std::max(tally.worst_step_relative, logits_relative_error(lo, lr));
    compare_greedy_rows(lr, lo, V, tally, "step " + std::to_string(step));
    StepResult result;
    int row = 0;
    for (const SequenceSlice& s : br.seqs) {
      if (!s.sample) continue;
      result.tokens.push_back({s.seq_id, argmax(&lr[static_cast<size_t>(row++) * V], V), 0.0f, {}});
    }
    hr.accept(result);
    ho.accept(result);
  }
  return tally;
}

}  // namespace troupe::gpu::testing
