// The CPU backend with a q8_0 KV cache (cache.kv_dtype q8_0) on the real default model against
// llama.cpp run as `-ctk q8_0 -ctv q8_0 -fa on` (tests/reference/smollm2_kv_q8_greedy.json, made
// by tests/reference/make_kv_q8_reference.py): the first step's logits and 64 greedy tokens of
// 20 prompts decoded together; the capacity the format buys; the logit error against the f16
// cache. Skips when the model file is absent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "gpu/cpu/cpu_backend.hpp"
#include "model/gguf.hpp"
#include "tests/gpu/cpu_step_harness.hpp"
#include "tests/gpu/cpu_test_util.hpp"
#include "tests/gpu/greedy_reference.hpp"
#include "tests/support/source_dir.hpp"

namespace troupe::gpu::cpu {
namespace {

using testing::GreedyPrompt;
using testing::StepHarness;
using Work = std::vector<std::pair<uint64_t, int32_t>>;

class KvQ8Model : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::filesystem::path path = testing::default_model_path();
    if (!std::filesystem::exists(path)) return;
    file_ = std::make_shared<const model::GgufFile>(model::GgufFile::open(path));
  }
  static void TearDownTestSuite() { file_.reset(); }
  void SetUp() override {
    if (file_ == nullptr) GTEST_SKIP() << "model not found: " << testing::default_model_path();
  }
  static std::unique_ptr<CpuBackend> backend(KvDtype dtype, int32_t num_blocks = 2048) {
    CpuBackendConfig cfg;
    cfg.num_blocks = num_blocks;
    cfg.kv_dtype = dtype;
    return CpuBackend::from_gguf(file_, cfg);
  }
  static std::vector<GreedyPrompt> reference() {
    return testing::read_greedy_reference(test_support::source_dir() / "tests" / "reference" /
                                          "smollm2_kv_q8_greedy.json");
  }
  static inline std::shared_ptr<const model::GgufFile> file_;
};

// Every prompt's first-step top-5 logits equal llama.cpp's q8_0-cache ones within the reference's
// rounding (4 decimals), all 20 prompts prefilled in one step.
TEST_F(KvQ8Model, FirstStepLogitsEqualLlamaCpp) {
  const std::vector<GreedyPrompt> prompts = reference();
  ASSERT_EQ(prompts.size(), 20u);
  auto b = backend(KvDtype::kQ8_0);
  const size_t vocab = static_cast<size_t>(b->model_config().n_vocab);
  StepHarness h(2048, 16);
  Work prefill;
  for (size_t i = 0; i < prompts.size(); ++i) {
    h.add(i, prompts[i].ids);
    prefill.push_back({i, static_cast<int32_t>(prompts[i].ids.size())});
  }
  const std::vector<float> logits = b->compute_logits(h.build(prefill));
  ASSERT_EQ(logits.size(), prompts.size() * vocab);
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (const auto& [id, value] : prompts[i].top[0]) {
      EXPECT_NEAR(logits[i * vocab + static_cast<size_t>(id)], value, 5e-5)
          << "prompt " << i << " id " << id;
    }
  }
}

// 64 greedy tokens of the 20 prompts decoded together equal llama.cpp's with its q8_0 cache (whose
// own f16-cache run parts from them in 17 of the 20: the file's f16_first_difference), and the
// f16 cache's logits are within a small error of the q8_0 cache's at the first step.
TEST_F(KvQ8Model, MatchesLlamaCppGreedyReference) {
  const std::vector<GreedyPrompt> prompts = reference();
  ASSERT_EQ(prompts.size(), 20u);
  auto b = backend(KvDtype::kQ8_0);
  StepHarness h(2048, 16);
  const int identical = testing::decode_together_and_compare(
      h, prompts, [&](const StepBatch& batch) { return b->run_step(batch); });
  std::printf("q8_0 KV: %d of %zu prompts identical to llama.cpp's over %zu greedy tokens\n",
              identical, prompts.size(), prompts[0].generated.size());
  EXPECT_EQ(identical, static_cast<int>(prompts.size()));
}

// The same memory holds 128/68 as many blocks (a 64-value fp16 row is 128 bytes, its q8_0 form
// 68), and the q8_0 cache's first-step logits stay near the f16 cache's: the error the format
// costs over the whole vocabulary (llama.cpp's own q8_0-vs-f16 error on prompt 0 is the same
// 1.19 at most, its logits being these to the bit).
TEST_F(KvQ8Model, HoldsMoreBlocksAndStaysNearTheF16Cache) {
  CpuBackendConfig cfg;
  cfg.kv_memory_bytes = 64ll << 20;
  cfg.kv_dtype = KvDtype::kF16;
  const int32_t f16_blocks = CpuBackend::from_gguf(file_, cfg)->kv_geometry().num_blocks;
  cfg.kv_dtype = KvDtype::kQ8_0;
  const KvCacheGeometry q8 = CpuBackend::from_gguf(file_, cfg)->kv_geometry();
  EXPECT_EQ(q8.dtype, KvDtype::kQ8_0);
  EXPECT_NEAR(static_cast<double>(q8.num_blocks) / f16_blocks, 128.0 / 68.0, 0.01);
  EXPECT_LE(q8.bytes, cfg.kv_memory_bytes);

  const std::vector<GreedyPrompt> prompts = reference();
  auto f16 = backend(KvDtype::kF16, 256);
  auto q8_backend = backend(KvDtype::kQ8_0, 256);
  double worst = 0.0, total = 0.0;
  size_t count = 0;
  for (size_t i = 0; i < prompts.size(); i += 4) {
    auto logits_of = [&](CpuBackend& be) {
      StepHarness h(256, 16);
      h.add(1, prompts[i].ids);
      return be.compute_logits(h.build({{1, static_cast<int32_t>(prompts[i].ids.size())}}));
    };
    const std::vector<float> a = logits_of(*f16), c = logits_of(*q8_backend);
    ASSERT_EQ(a.size(), c.size());
    for (size_t j = 0; j < a.size(); ++j) {
      const double d = std::fabs(double(a[j]) - c[j]);
      worst = testing::max_or_nan(worst, d);
      total += d;
      ++count;
    }
  }
  const double mean = total / static_cast<double>(count);
  std::printf("q8_0 vs f16 KV, first-step logits of 5 prompts: mean |diff| %.4f, max %.4f\n",
              mean, worst);
  EXPECT_GT(worst, 0.0);  // the formats differ, so the numbers must
  EXPECT_LT(mean, 0.3);
  EXPECT_LT(worst, 2.5);
}

// A model or setting the q8_0 cache cannot run is refused by name.
TEST_F(KvQ8Model, UnsupportedCombinationsAreRefusedByName) {
  CpuBackendConfig cfg;
  cfg.num_blocks = 64;
  cfg.kv_dtype = KvDtype::kFp8E4M3;
  try {
    CpuBackend::from_gguf(file_, cfg);
    ADD_FAILURE() << "fp8_e4m3 accepted on the CPU backend";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fp8_e4m3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace troupe::gpu::cpu
