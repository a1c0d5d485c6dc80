// parity_probe: a debugging tool, not a test. Runs one reference prompt's prefill (or its first
// decode step) through the CPU backend with the forward pass tapped, and writes every tapped
// intermediate to DIR/<name>-<layer>.f32 (rows x cols, float32) and the logits to
// DIR/logits-(-1).f32, for comparison with llama.cpp's cb_eval dump when greedy parity breaks.
//
//   build/tests/parity_probe DIR [PROMPT_INDEX] [--decode]    (model: $TROUPE_TEST_MODEL or
//                                                              models/SmolLM2-135M-Instruct.Q4_1.gguf)
// TROUPE_PROBE_IDS=2,818,5279 runs those token ids instead of a reference prompt;
// TROUPE_PROBE_KV_DTYPE=q8_0 runs with that KV cache format. Each tap also
// prints its sum and first values, the figures llama-eval-callback prints.
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
  // A one-line summary to compare with llama-eval-callback's: the sum, and row 0's first values.
  double sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) sum += data[r * ld + c];
  }
  std::printf("%-14s %3d  sum %14.6f  row0 %9.4f %9.4f %9.4f\n", name, layer, sum, data[0],
              cols > 1 ? data[1] : 0.0f, cols > 2 ? data[2] : 0.0f);
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
  if (const char* dtype = std::getenv("TROUPE_PROBE_KV_DTYPE")) {  // "q8_0": a q8_0 KV cache
    config.kv_dtype = troupe::gpu::kKvDtypeNames.parse(dtype).value_or(troupe::gpu::KvDtype::kF16);
  }
  bool recording = false;  // the step of interest only
  config.observer = [&recording](const char* name, int32_t layer, const float* data, int64_t rows,
                                 int64_t cols, int64_t ld) {
    if (recording) write_tap(name, layer, data, rows, cols, ld);
  };
  auto backend = troupe::gpu::cpu::CpuBackend::from_gguf(file, config);

  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load((source / "tests" / "reference" / "smollm2_greedy.json").string());
  std::vector<int32_t> ids;
  if (const char* list = std::getenv("TROUPE_PROBE_IDS")) {  // "2,818,5279": ids, not a prompt index
    for (const char* p = list; *p != '\0';) {
      char* end = nullptr;
      ids.push_back(static_cast<int32_t>(std::strtol(p, &end, 10)));
      p = *end == ',' ? end + 1 : end;
    }
  } else {
    for (int64_t v : doc["prompts"].get_array().at(prompt_index)["prompt_ids"].get_array()) {
      ids.push_back(static_cast<int32_t>(v));
    }
  }
  StepHarness h(2048, 16);
  h.set_kv_groups(backend->kv_geometry().num_kv_groups, backend->kv_geometry().sliding_window);
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
