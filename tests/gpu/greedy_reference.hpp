// llama.cpp's greedy reference data (tests/reference/*_greedy.json, made by
// tests/reference/make_reference.py and make_gemma3_reference.py): per prompt, its ids, the
// greedily generated ids and each step's top (id, logit) pairs.
//
// Thread-safety: plain values; read once per test.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <filesystem>
#include <utility>
#include <vector>

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

}  // namespace troupe::gpu::cpu::testing
