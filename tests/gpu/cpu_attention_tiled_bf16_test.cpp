// The bf16 tiled prefill attention (attention_tiled_bf16.hpp): its AVX512-BF16 kernels against
// the scalar twin bit for bit, the tile against the exact path within the documented tolerance,
// the incremental K/V conversion, the real model's logits of a long prompt with bf16 attention
// against exact, and the backend refusing bf16 where the CPU cannot run it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/cpu/attention_tiled_bf16.hpp"
#include "gpu/cpu/cpu_backend.hpp"
#include "model/dummy_weights.hpp"
#include "model/gguf.hpp"
#include "model/tokenizer.hpp"
#include "tests/gpu/cpu_attention_test_support.hpp"
#include "tests/gpu/cpu_step_harness.hpp"
#include "tests/gpu/cpu_test_util.hpp"

namespace troupe::gpu::cpu {
namespace {

using testing::TileCase;
using testing::TileSetup;

// Every KV head of the case's chunk as one bf16 tile per head (or split at `split` tokens).
std::vector<float> bf16_tiled(TileSetup& setup, const TileCase& cs, Bf16Kernels kernels, int32_t split = 0) {
  std::vector<float> out(setup.q.size(), -1.0f);
  AttentionTileScratch scores;
  AttentionTileBf16Scratch scratch;
  ConvertedHeadBf16 converted;
  for (int32_t h = 0; h < TileSetup::kKvHeads; ++h) {
    for (int32_t i0 = 0; i0 < cs.num_tokens;) {
      const int32_t n = split > 0 ? std::min(split, cs.num_tokens - i0) : cs.num_tokens;
      const auto words =
          converted.get(setup.cache.view, setup.table.data(), h, cs.first + i0 + n, kernels);
      const int64_t at = i0 * setup.stride + static_cast<int64_t>(h) * cs.group * cs.hd;
      const AttentionTile shape{.head_dim = cs.hd,
                                .first_position = cs.first + i0,
                                .num_tokens = n,
                                .group = cs.group,
                                .q = setup.q.data() + at,
                                .q_stride = setup.stride,
                                .out = out.data() + at,
                                .out_stride = setup.stride,
                                .scale = setup.scale};
      attention_tile_bf16({.shape = shape, .k = words.k, .v = words.v}, scores, scratch, kernels);
      i0 += n;
    }
  }
  return out;
}

std::vector<TileCase> tile_cases() {
  std::vector<TileCase> cases;
  for (int32_t group : {1, 3}) {
    for (int32_t hd : {16, 64, 128}) {
      cases.push_back({group, hd, 0, 1, 16});
      cases.push_back({group, hd, 0, 37, 16});
      cases.push_back({group, hd, 61, 20, 16});
      cases.push_back({group, hd, 1500, 33, 32});
    }
  }
  return cases;
}

// Every bf16 kernel level this CPU runs, the scalar twin first.
std::vector<Bf16Kernels> runnable_bf16_kernels() {
  std::vector<Bf16Kernels> levels{Bf16Kernels::kScalar};
  if (bf16_attention_supported()) levels.push_back(Bf16Kernels::kAvx512);
  if (bf16_attention_supported() && bf16_amx_supported()) levels.push_back(Bf16Kernels::kAmx);
  return levels;
}

float largest_abs_v(const TileSetup& setup) {
  float m = 0.0f;
  for (const uint16_t h : setup.cache.v) m = std::max(m, std::fabs(model::fp16_to_fp32(h)));
  return m;
}

// Largest |a - b| over the case's outputs (the strided rows' head columns).
float largest_difference(const TileSetup& setup, const TileCase& cs, const std::vector<float>& a,
                         const std::vector<float>& b) {
  float worst = 0.0f;
  for (int32_t i = 0; i < cs.num_tokens; ++i) {
    for (int32_t c = 0; c < TileSetup::kKvHeads * cs.group * cs.hd; ++c) {
      const int64_t at = i * setup.stride + c;
      worst = testing::max_or_nan(worst, std::fabs(a[at] - b[at]));
    }
  }
  return worst;
}

std::string describe(const TileCase& cs) {
  return "group " + std::to_string(cs.group) + " hd " + std::to_string(cs.hd) + " first " +
         std::to_string(cs.first) + " tokens " + std::to_string(cs.num_tokens);
}

// The AVX512-BF16 kernels in vdpbf16ps' order are the scalar twin's bits: scores over whole
// panels, values over key pairs, row counts the 6-row blocks do not divide, odd key counts,
// head sizes 16 to 128.
TEST(AttentionTiledBf16, Avx512MatchesScalarTwinBitExact) {
  if (!bf16_attention_supported()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  for (const TileCase& cs : tile_cases()) {
    TileSetup setup(cs);
    const std::vector<float> want = bf16_tiled(setup, cs, Bf16Kernels::kScalar);
    const std::vector<float> got = bf16_tiled(setup, cs, Bf16Kernels::kAvx512);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), 4 * want.size())) << describe(cs);
  }
}

// The AMX tiles sum each 32 products in their own order, so a score may differ from the scalar
// twin's in its last bit, and a probability then round to the neighbouring bf16 value: outputs
// within 2^-8 of the largest |V| (measured: most within 1e-6 of it, the worst 1e-4; a wrong
// layout or a missed key block is off by tenths).
TEST(AttentionTiledBf16, AmxMatchesScalarTwinWithinRounding) {
  if (!bf16_attention_supported() || !bf16_amx_supported()) GTEST_SKIP() << "no AMX-BF16 here";
  for (const TileCase& cs : tile_cases()) {
    TileSetup setup(cs);
    const std::vector<float> want = bf16_tiled(setup, cs, Bf16Kernels::kScalar);
    const std::vector<float> got = bf16_tiled(setup, cs, Bf16Kernels::kAmx);
    EXPECT_LE(largest_difference(setup, cs, want, got), std::ldexp(largest_abs_v(setup), -8))
        << describe(cs);
  }
}

// Within the tolerance attention_tiled_bf16.hpp documents, at every level: every output within
// 2e-2 of the exact path's, relative to the largest |V| (random V of unit scale, scores of a few
// units: the bf16 rounding of K moves a score by ~1 %, its probability by as much). The same
// whatever the tile split (the conversion grows with each tile), and never reading a key past
// its own (a causal leak moves outputs by tenths).
TEST(AttentionTiledBf16, WithinToleranceOfExactPath) {
  for (const TileCase& cs : tile_cases()) {
    TileSetup setup(cs);
    const std::vector<float> exact = setup.per_token(cs, IsaLevel::kScalar, /*fp16p=*/true);
    for (const Bf16Kernels kernels : runnable_bf16_kernels()) {
      const std::vector<float> whole = bf16_tiled(setup, cs, kernels);
      const std::vector<float> split = bf16_tiled(setup, cs, kernels, 7);
      EXPECT_LE(largest_difference(setup, cs, whole, exact), 2e-2f * largest_abs_v(setup))
          << describe(cs) << " level " << static_cast<int>(kernels);
      EXPECT_LE(largest_difference(setup, cs, whole, split), 1e-5f * largest_abs_v(setup))
          << describe(cs) << " level " << static_cast<int>(kernels) << ", tiles of 7 tokens";
    }
  }
}

// Growing the conversion key by key, at the best level, gives the words a fresh scalar
// conversion gives, including the zeros past the last key that whole panels and pairs read.
TEST(AttentionTiledBf16, IncrementalConversionEqualsFresh) {
  const TileCase cs{3, 64, 40, 30, 16};
  TileSetup setup(cs);
  const Bf16Kernels best = best_bf16_kernels();
  ConvertedHeadBf16 grown;
  grown.get(setup.cache.view, setup.table.data(), 1, 70, best);  // another head: stale words
  grown.get(setup.cache.view, setup.table.data(), 0, 3, best);
  for (int32_t n : {5, 16, 17, 33, 64, 69}) {
    const auto got = grown.get(setup.cache.view, setup.table.data(), 0, n, best);
    ConvertedHeadBf16 fresh_head;
    const auto want = fresh_head.get(setup.cache.view, setup.table.data(), 0, n, Bf16Kernels::kScalar);
    const int32_t panels = (n + 15) / 16;
    ASSERT_EQ(0, std::memcmp(want.k, got.k, 4 * panels * 16 * cs.hd / 2)) << n;
    ASSERT_EQ(0, std::memcmp(want.v, got.v, 4 * ((n + 1) / 2) * cs.hd)) << n;
  }
}

// Where vdpbf16ps does not run, bf16 would only be slower than exact: the backend says so.
TEST(AttentionTiledBf16, BackendRefusesBf16BelowAvx512Bf16) {
  const auto weights = model::make_dummy_weights(testing::tiny_config(), model::TensorType::kQ4_1, 3);
  CpuBackendConfig cfg;
  cfg.num_blocks = 16;
  cfg.isa = IsaLevel::kScalar;
  cfg.prefill_attention = PrefillAttentionPrecision::kBf16;
  try {
    CpuBackend backend(weights, cfg);
    FAIL() << "bf16 prefill attention accepted at the scalar level";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
  }
}

TEST(AttentionTiledBf16, PrecisionNamesRoundTrip) {
  for (const auto p : {PrefillAttentionPrecision::kExact, PrefillAttentionPrecision::kBf16}) {
    EXPECT_EQ(parse_prefill_attention_precision(to_string(p)), p);
  }
  EXPECT_FALSE(parse_prefill_attention_precision("fp8"));
}


// ~1,500 tokens of English: numbered facts, so the next token is well defined.
std::vector<int32_t> long_prompt(const model::GgufFile& file) {
  std::string text;
  const char* facts[] = {"Paris is the capital of France.", "Water boils at 100 degrees Celsius.",
                         "The Moon orbits the Earth.", "Bees make honey from nectar.",
                         "Rome is the capital of Italy.", "Ice melts at 0 degrees Celsius."};
  for (int i = 0; i < 150; ++i) text += "Fact " + std::to_string(i + 1) + ": " + facts[i % 6] + "\n";
  text += "Fact 151: Paris is the capital of";
  return model::Tokenizer::from_gguf(file).encode(text, /*parse_special=*/false);
}

// Last-position logits of the prompt fed in 512-token chunks.
std::vector<float> prompt_logits(const std::shared_ptr<const model::GgufFile>& file,
                                 PrefillAttentionPrecision precision,
                                 const std::vector<int32_t>& tokens) {
  const int32_t n = static_cast<int32_t>(tokens.size());
  CpuBackendConfig cfg;
  cfg.num_blocks = n / 16 + 8;
  cfg.num_threads = 2;
  cfg.prefill_attention = precision;
  auto backend = CpuBackend::from_gguf(file, cfg);
  testing::StepHarness h(cfg.num_blocks, 16);
  h.add(1, tokens);
  std::vector<float> logits;
  for (int32_t done = 0; done < n; done += 512) {
    logits = backend->compute_logits(h.build({{1, std::min(512, n - done)}}));
  }
  return logits;
}

// The real model over a 1,536-token prompt: bf16 attention keeps the exact path's next token,
// and moves no logit by more than 5 % of the logits' spread (measured: see the assertion's
// message when it fails, ~1 % here).
TEST(AttentionTiledBf16, RealModelLongPromptKeepsTheNextToken) {
  if (!bf16_attention_supported()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  const std::filesystem::path path = testing::default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found: " << path;
  const auto file = std::make_shared<const model::GgufFile>(model::GgufFile::open(path));
  const std::vector<int32_t> tokens = long_prompt(*file);
  ASSERT_GT(tokens.size(), 1200u);
  const std::vector<float> exact = prompt_logits(file, PrefillAttentionPrecision::kExact, tokens);
  const std::vector<float> bf16 = prompt_logits(file, PrefillAttentionPrecision::kBf16, tokens);
  ASSERT_EQ(exact.size(), bf16.size());
  const auto argmax = [](const std::vector<float>& v) {
    return std::max_element(v.begin(), v.end()) - v.begin();
  };
  EXPECT_EQ(argmax(exact), argmax(bf16));
  const auto [lo, hi] = std::minmax_element(exact.begin(), exact.end());
  float worst = 0.0f;
  for (size_t i = 0; i < exact.size(); ++i) {
    worst = testing::max_or_nan(worst, std::fabs(exact[i] - bf16[i]));
  }
  EXPECT_LE(worst, 0.05f * (*hi - *lo)) << "largest logit change " << worst << " of a spread "
                                        << (*hi - *lo);
  EXPECT_GT(worst, 0.0f) << "bf16 attention gave the exact logits: was it used at all?";
  std::printf("[bf16] exact top %.4f, bf16's pick %.4f in exact\n", exact[argmax(exact)], exact[argmax(bf16)]);
  std::printf("[bf16] largest logit change %.4f of a spread %.2f\n", worst, *hi - *lo);
}

}  // namespace
}  // namespace troupe::gpu::cpu
