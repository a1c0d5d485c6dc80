// parity_probe: a debugging tool, not a test. Runs one reference prompt's prefill (or its first
// decode step) through the CPU backend with the forward pass tapped, and writes every tapped
// intermediate to DIR/<name>-<layer>.f32 (rows x cols, float32) and the logits to
// DIR/logits-(-1).f32, for comparison with llama.cpp's cb_eval dump when greedy parity breaks.
//
//   build/tests/parity_probe DIR [PROMPT_INDEX] [--decode]    (model: $TROUPE_TEST_MODEL or
//                                                              models/SmolLM2-135M-Instruct.Q4_1.gguf)
#include <simdjson.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/cpu/forward.hpp"
#include "model/gguf.hpp"
#include "tests/gpu/cpu_step_harness.hpp"

namespace {

using troupe::gpu::StepResult;
using troupe::gpu::cpu::testing::StepHarness;

std::string g_dir;

void write_tap(const char* name, int32_t layer, const float* data, int64_t rows, int64_t cols,
               int64_t ld) {
  const std::string path = g_dir + "/" + name + "-" + std::to_string(layer) + ".f32";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return;
  for (int64_t r = 0; r < rows; ++r) std::fwrite(data + r * ld, sizeof(float), cols, f);
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [PROMPT_INDEX] [--decode]\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  size_t prompt_index = 0;
  bool decode = false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--decode") == 0) {
      decode = true;
    } else {
      prompt_index = std::strtoul(argv[i], nullptr, 10);
    }
  }
  const std::filesystem::path source(TROUPE_SOURCE_DIR);
  const char* env = std::getenv("TROUPE_TEST_MODEL");
  const std::filesystem::path model =
      env != nullptr ? env : source / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  auto file = std::make_shared<const troupe::model::GgufFile>(troupe::model::GgufFile::open(model));
  troupe::gpu::cpu::CpuBackendConfig config;
  config.num_blocks = 2048;
  bool recording = false;  // the step of interest only
  config.observer = [&recording](const char* name, int32_t layer, const float* data, int64_t rows,
                                 int64_t cols, int64_t ld) {
    if (recording) write_tap(name, layer, data, rows, cols, ld);
  };
  auto backend = troupe::gpu::cpu::CpuBackend::from_gguf(file, config);

  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load((source / "tests" / "reference" / "smollm2_greedy.json").string());
  std::vector<int32_t> ids;
  for (int64_t v : doc["prompts"].get_array().at(prompt_index)["prompt_ids"].get_array()) {
    ids.push_back(static_cast<int32_t>(v));
  }
  StepHarness h(2048, 16);
  h.add(0, ids);
  std::vector<float> logits;
  if (decode) {  // the first decode step, after an untapped prefill
    const auto first = backend->compute_logits(h.build({{0, static_cast<int32_t>(ids.size())}}));
    StepResult r;
    r.tokens.push_back(
        {0, static_cast<int32_t>(std::max_element(first.begin(), first.end()) - first.begin()), 0.0f, {}});
    h.accept(r);
    recording = true;
    logits = backend->compute_logits(h.build({{0, 1}}));
  } else {
    recording = true;
    logits = backend->compute_logits(h.build({{0, static_cast<int32_t>(ids.size())}}));
  }
  recording = false;
  write_tap("logits", -1, logits.data(), 1, static_cast<int64_t>(logits.size()),
            static_cast<int64_t>(logits.size()));
  std::printf("wrote the taps of prompt %zu (%s) to %s\n", prompt_index, decode ? "decode" : "prefill",
              g_dir.c_str());
  return 0;
}
