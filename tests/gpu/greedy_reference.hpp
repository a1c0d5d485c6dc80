// llama.cpp's greedy reference data (tests/reference/*_greedy.json, made by
// tests/reference/make_reference.py and make_gemma3_reference.py): per prompt, its ids, the
// greedily generated ids and each step's top (id, logit) pairs; and the shared check that
// decodes them together and compares.
//
// Thread-safety: plain values; read once per test.
#pragma once

#include <gtest/gtest.h>
#include <simdjson.h>

#include <cstdint>
#include <filesystem>
#include <utility>
#include <vector>

#include "tests/gpu/cpu_step_harness.hpp"

namespace troupe::gpu::cpu::testing {

struct GreedyPrompt {
  std::vector<int32_t> ids, generated;
  std::vector<std::vector<std::pair<int32_t, double>>> top;  // per step
};

inline std::vector<GreedyPrompt> read_greedy_reference(const std::filesystem::path& path) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(path.string());
  auto ids_of = [](simdjson::dom::array a) {
    std::vector<int32_t> out;
    for (int64_t v : a) out.push_back(static_cast<int32_t>(v));
    return out;
  };
  std::vector<GreedyPrompt> prompts;
  for (simdjson::dom::element p : doc["prompts"].get_array()) {
    GreedyPrompt q;
    q.ids = ids_of(p["prompt_ids"]);
    q.generated = ids_of(p["generated_ids"]);
    for (simdjson::dom::element step : p["top"].get_array()) {
      std::vector<std::pair<int32_t, double>> t;
      for (simdjson::dom::element pair : step.get_array()) {
        t.push_back({static_cast<int32_t>(int64_t(pair.at(0))), double(pair.at(1))});
      }
      q.top.push_back(std::move(t));
    }
    prompts.push_back(std::move(q));
  }
  return prompts;
}

// Every prompt prefilled in one step, then all decoded together one token a step (continuous
// batching's shape) for as many steps as the reference generated; each sequence's tokens are
// compared with llama.cpp's, a divergence reported with llama.cpp's top-2 gap at that step (a
// near tie points at rounding, a wide gap at a bug). Returns how many prompts are identical
// throughout. run_step: StepBatch -> StepResult (the backend's run_step).
template <class RunStep>
int decode_together_and_compare(StepHarness& h, const std::vector<GreedyPrompt>& prompts,
                                RunStep run_step) {
  std::vector<std::pair<uint64_t, int32_t>> prefill, decode;
  for (size_t i = 0; i < prompts.size(); ++i) {
    h.add(i, prompts[i].ids);
    prefill.push_back({i, static_cast<int32_t>(prompts[i].ids.size())});
    decode.push_back({i, 1});
  }
  h.accept(run_step(h.build(prefill)));
  const size_t n_gen = prompts.empty() ? 0 : prompts[0].generated.size();
  for (size_t step = 1; step < n_gen; ++step) h.accept(run_step(h.build(decode)));
  int identical = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& got = h.seq(i).tokens;
    const std::vector<int32_t> gen(got.begin() + static_cast<std::ptrdiff_t>(prompts[i].ids.size()),
                                   got.end());
    size_t k = 0;
    while (k < n_gen && k < gen.size() && gen[k] == prompts[i].generated[k]) ++k;
    if (k == n_gen) {
      ++identical;
      continue;
    }
    const auto& top = prompts[i].top[k];
    ADD_FAILURE() << "prompt " << i << " (" << prompts[i].ids.size() << " tokens) diverges at step "
                  << k << ": ours " << (k < gen.size() ? gen[k] : -1) << ", llama.cpp "
                  << prompts[i].generated[k] << " (llama.cpp top-2 gap "
                  << top[0].second - top[1].second << ")";
  }
  return identical;
}

}  // namespace troupe::gpu::cpu::testing
