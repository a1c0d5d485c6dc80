// Paged attention against a float64 reference, scattered blocks against contiguous ones, GQA
// grouping, and the tiled prefill path against the per-token one bit for bit (kernels and the
// forward pass's mix of prompt tiles and generated tokens).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "gpu/cpu/attention.hpp"
#include "gpu/cpu/attention_tiled.hpp"
#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/cpu/forward.hpp"
#include "model/dummy_weights.hpp"
#include "tests/gpu/cpu_attention_test_support.hpp"
#include "tests/gpu/cpu_step_harness.hpp"
#include "tests/gpu/cpu_test_util.hpp"

namespace troupe::gpu::cpu {
namespace {

using testing::Cache;
using testing::fill;
using testing::TileCase;
using testing::TileSetup;

// Tolerance: 2e-5 absolute on outputs of magnitude ~1 (float32 scores and sums vs double).
TEST(Attention, MatchesReferenceForShapesAndLengths) {
  struct Case {
    int32_t kv_heads, group, hd, n;
  };
  for (const Case& cs : {Case{3, 3, 64, 1}, Case{3, 3, 64, 37}, Case{1, 1, 16, 5},
                         Case{2, 4, 128, 100}, Case{1, 2, 24, 19}, Case{8, 4, 64, 300}}) {
    const int32_t bs = 16;
    const int32_t nblocks = (cs.n + bs - 1) / bs;
    Cache c(nblocks + 5, bs, cs.kv_heads, cs.hd);
    std::vector<int32_t> table(nblocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(cs.n));
    for (auto& b : table) b += 3;
    fill(c, table, cs.n, 5);
    const float scale = 1.0f / std::sqrt(static_cast<float>(cs.hd));
    for (int32_t h = 0; h < cs.kv_heads; ++h) {
      const auto q = testing::random_floats(static_cast<size_t>(cs.group) * cs.hd, 100 + h, 2.0f);
      std::vector<float> want(q.size());
      attention_group_reference(c.view, table.data(), cs.n, h, q.data(), cs.group, scale,
                                want.data());
      for (IsaLevel isa : runnable_isas()) {
        std::vector<float> got(q.size()), scratch(static_cast<size_t>(cs.group) * cs.n);
        attention_group(c.view, table.data(), cs.n, h, q.data(), cs.group, scale, got.data(),
                        scratch.data(), isa);
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 2e-5) << to_string(isa) << " n=" << cs.n << " i=" << i;
        }
      }
    }
  }
}

TEST(Attention, ScatteredBlocksEqualContiguousBitExact) {
  const int32_t bs = 16, n = 75, kv_heads = 3, hd = 64, group = 3;
  const int32_t nb = (n + bs - 1) / bs;
  Cache contiguous(nb, bs, kv_heads, hd), scattered(40, bs, kv_heads, hd);
  std::vector<int32_t> t1(nb), t2 = {31, 2, 17, 9, 38};
  std::iota(t1.begin(), t1.end(), 0);
  fill(contiguous, t1, n, 77);
  fill(scattered, t2, n, 77);
  const auto q = testing::random_floats(group * hd, 1);
  for (IsaLevel isa : runnable_isas()) {
    for (int32_t h = 0; h < kv_heads; ++h) {
      std::vector<float> a(group * hd), b(group * hd), s(group * n);
      attention_group(contiguous.view, t1.data(), n, h, q.data(), group, 0.125f, a.data(), s.data(), isa);
      attention_group(scattered.view, t2.data(), n, h, q.data(), group, 0.125f, b.data(), s.data(), isa);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), 4 * a.size())) << to_string(isa);
    }
  }
}

// Every SIMD path is the scalar order exactly: both reduction orders (chunk, decode), with and
// without fp16 probabilities, odd lengths around the 8- and 32-key boundaries, block sizes that
// do not divide them, head sizes that take the SIMD path and ones that fall back.
TEST(Attention, SimdPathsMatchScalarBitExact) {
  struct Case {
    int32_t kv_heads, group, hd, n, bs;
  };
  std::vector<Case> cases;
  for (int32_t n : {1, 2, 7, 8, 9, 31, 32, 33, 40, 64, 65, 100, 301}) {
    cases.push_back({3, 3, 64, n, 16});
    cases.push_back({1, 4, 128, n, 5});
    cases.push_back({2, 1, 32, n, 16});
    cases.push_back({1, 2, 24, n, 7});
    cases.push_back({1, 2, 96, n, 16});
    cases.push_back({1, 1, 16, n, 3});
  }
  for (const Case& cs : cases) {
    const int32_t nblocks = (cs.n + cs.bs - 1) / cs.bs;
    Cache c(nblocks + 2, cs.bs, cs.kv_heads, cs.hd);
    std::vector<int32_t> table(nblocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(cs.n + cs.hd));
    for (auto& b : table) b += 1;
    fill(c, table, cs.n, 11 + cs.n);
    const float scale = 1.0f / std::sqrt(static_cast<float>(cs.hd));
    for (int32_t h = 0; h < cs.kv_heads; ++h) {
      auto q = testing::random_floats(static_cast<size_t>(cs.group) * cs.hd, 200 + h, 3.0f);
      for (float& x : q) x = model::fp16_to_fp32(model::fp32_to_fp16(x));
      for (bool single : {false, true}) {
        for (bool fp16p : {false, true}) {
          std::vector<float> want(q.size()), s0(static_cast<size_t>(cs.group) * cs.n);
          attention_group(c.view, table.data(), cs.n, h, q.data(), cs.group, scale, want.data(),
                          s0.data(), IsaLevel::kScalar, fp16p, single);
          for (IsaLevel isa : runnable_isas()) {
            std::vector<float> got(q.size()), s1(s0.size());
            attention_group(c.view, table.data(), cs.n, h, q.data(), cs.group, scale, got.data(),
                            s1.data(), isa, fp16p, single);
            ASSERT_EQ(0, std::memcmp(want.data(), got.data(), 4 * got.size()))
                << to_string(isa) << " hd=" << cs.hd << " n=" << cs.n << " bs=" << cs.bs
                << " single=" << single << " fp16p=" << fp16p;
          }
        }
      }
    }
  }
}

// The decode kernels take a GQA group at once (each K/V row converted once for up to 4 query
// heads, larger groups in several passes): at long contexts, lengths that no 8-, 16- or 32-key
// group divides and scattered blocks, every level gives the scalar bits, and a group at once
// gives the bits of its heads one by one (what lets the forward pass cut groups into runs).
TEST(Attention, DecodeGroupKernelsMatchScalarAtLongContexts) {
  struct Case {
    int32_t group, hd, n, bs;
  };
  std::vector<Case> cases;
  for (int32_t n : {1, 17, 33, 1024, 1031, 2049}) {
    cases.push_back({3, 64, n, 16});
    cases.push_back({5, 64, n, 16});
  }
  for (int32_t n : {47, 1000}) {
    cases.push_back({1, 64, n, 7});
    cases.push_back({2, 128, n, 16});
    cases.push_back({4, 96, n, 5});
    cases.push_back({8, 32, n, 16});
  }
  constexpr int32_t kKvHeads = 2;
  for (const Case& cs : cases) {
    const int32_t nblocks = (cs.n + cs.bs - 1) / cs.bs;
    Cache c(nblocks + 9, cs.bs, kKvHeads, cs.hd);
    std::vector<int32_t> table(nblocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(cs.n * 3 + cs.group));
    for (auto& b : table) b += 5;
    fill(c, table, cs.n, 41 + cs.n);
    const float scale = 1.0f / std::sqrt(static_cast<float>(cs.hd));
    const int32_t h = 1;
    auto q = testing::random_floats(static_cast<size_t>(cs.group) * cs.hd, 300 + cs.n, 3.0f);
    for (float& x : q) x = model::fp16_to_fp32(model::fp32_to_fp16(x));
    std::vector<float> want(q.size()), s(static_cast<size_t>(cs.group) * cs.n);
    attention_group(c.view, table.data(), cs.n, h, q.data(), cs.group, scale, want.data(), s.data(),
                    IsaLevel::kScalar, /*fp16_probabilities=*/true, /*single_token=*/true);
    for (IsaLevel isa : runnable_isas()) {
      const std::string what = std::string(to_string(isa)) + " group=" + std::to_string(cs.group) +
                               " hd=" + std::to_string(cs.hd) + " n=" + std::to_string(cs.n) +
                               " bs=" + std::to_string(cs.bs);
      std::vector<float> together(q.size(), -1.0f), one_by_one(q.size(), -1.0f);
      attention_group(c.view, table.data(), cs.n, h, q.data(), cs.group, scale, together.data(),
                      s.data(), isa, true, true);
      for (int32_t g = 0; g < cs.group; ++g) {
        attention_group(c.view, table.data(), cs.n, h, q.data() + g * cs.hd, 1, scale,
                        one_by_one.data() + g * cs.hd, s.data(), isa, true, true);
      }
      ASSERT_EQ(0, std::memcmp(want.data(), together.data(), 4 * want.size())) << what;
      ASSERT_EQ(0, std::memcmp(want.data(), one_by_one.data(), 4 * want.size())) << what;
    }
  }
}

TEST(Attention, SingleKeyReturnsItsValue) {
  Cache c(1, 16, 1, 16);
  std::vector<int32_t> table = {0};
  const auto kv = fill(c, table, 1, 3);
  const auto q = testing::random_floats(16, 4);
  std::vector<float> out(16), s(1);
  attention_group(c.view, table.data(), 1, 0, q.data(), 1, 1.0f, out.data(), s.data(), default_isa());
  for (int d = 0; d < 16; ++d) EXPECT_EQ(out[d], model::fp16_to_fp32(model::fp32_to_fp16(kv[16 + d])));
}

// The forward pass's per-token items: every query head of every token exactly once, each run
// inside one KV head's group; whole groups when they divide evenly between the threads, and the
// leftover groups cut for the threads to share.
TEST(AttentionPlan, HeadRunsCoverEveryQueryHeadOnce) {
  std::vector<LlamaForward::HeadRun> runs;
  for (int64_t singles : {0, 1, 2, 3, 5}) {
    for (int32_t kv_heads : {1, 3, 4}) {
      for (int32_t group : {1, 3, 4, 7}) {
        for (int threads : {1, 2, 3, 16}) {
          LlamaForward::plan_head_runs(singles, kv_heads, group, threads, runs);
          std::vector<int> seen(static_cast<size_t>(singles) * kv_heads * group, 0);
          for (const auto& r : runs) {
            ASSERT_GT(r.num_heads, 0);
            ASSERT_EQ(r.first_head / group, (r.first_head + r.num_heads - 1) / group);
            for (int32_t i = 0; i < r.num_heads; ++i) {
              ++seen[static_cast<size_t>(r.single) * kv_heads * group + r.first_head + i];
            }
          }
          for (int v : seen)
            ASSERT_EQ(v, 1) << singles << " " << kv_heads << " " << group << " " << threads;
          const int64_t groups = singles * kv_heads;
          if (threads == 1 || groups % threads == 0) {
            EXPECT_EQ(runs.size(), static_cast<size_t>(groups));
          }
        }
      }
    }
  }
  // SmolLM2-135M at batch 1 on two threads: 3 KV heads x 3 query heads -> runs of 3, 3, 2, 1.
  LlamaForward::plan_head_runs(1, 3, 3, 2, runs);
  std::vector<int32_t> sizes;
  for (const auto& r : runs) sizes.push_back(r.num_heads);
  EXPECT_EQ(sizes, (std::vector<int32_t>{3, 3, 2, 1}));
}

// The tile is the per-token chunk order exactly, for every kernel level: against the scalar
// per-token path and against the SIMD per-token path at the same level. `cases` start at 0 or
// deep in the context (up to 5,000 keys), with lengths that no tile, key block or 16-key panel
// divides (ragged rows, row counts the AVX-512 kernels' 3-row blocks do not divide), head sizes
// that take each kernel level and fall back.
void expect_tiles_match_per_token(const std::vector<TileCase>& cases) {
  AttentionTileScratch scratch;  // reused across shapes, as a pool thread's is
  for (const TileCase& cs : cases) {
    TileSetup setup(cs);
    // The forward pass always rounds probabilities to fp16; the unrounded form only on short
    // contexts (the scalar references are slow).
    const bool deep = cs.first > 4000;
    for (bool fp16p : cs.first > 300 ? std::vector<bool>{true} : std::vector<bool>{false, true}) {
      const auto want = setup.per_token(cs, IsaLevel::kScalar, fp16p);
      for (IsaLevel isa : runnable_isas()) {
        const auto got = setup.tiled(cs, isa, fp16p, scratch);
        const auto simd = isa == IsaLevel::kScalar || deep ? want : setup.per_token(cs, isa, fp16p);
        const std::string what =
            std::string(to_string(isa)) + " group=" + std::to_string(cs.group) +
            " hd=" + std::to_string(cs.hd) + " first=" + std::to_string(cs.first) +
            " n=" + std::to_string(cs.num_tokens) + " fp16p=" + std::to_string(fp16p);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), 4 * got.size())) << what;
        ASSERT_EQ(0, std::memcmp(simd.data(), got.data(), 4 * got.size())) << what;
      }
    }
  }
}

TEST(AttentionTiled, MatchesPerTokenChunkOrderBitExact) {
  std::vector<TileCase> cases;
  for (int32_t group : {1, 3, 4}) {
    for (int32_t hd : {64, 128}) {
      cases.push_back({group, hd, 0, 1, 16});
      cases.push_back({group, hd, 0, 37, 16});
      cases.push_back({group, hd, 3, 8, 5});
      cases.push_back({group, hd, 250, 61, 16});
    }
  }
  cases.push_back({3, 64, 1021, 13, 7});
  cases.push_back({4, 128, 1021, 13, 7});
  cases.push_back({3, 24, 70, 19, 16});  // AVX2 only (24 % 16 != 0)
  cases.push_back({2, 80, 70, 19, 16});  // AVX-512 with a 16-dim remainder block
  cases.push_back({1, 20, 9, 11, 4});    // scalar only
  expect_tiles_match_per_token(cases);
}

// The same 5,000 keys deep: half a minute under ASan for the scalar references, so SLOW there
// (tests/gpu/cpu_kernels.cmake); the shapes above keep the tiles' edges under the sanitizer.
TEST(AttentionTiled, MatchesPerTokenChunkOrderBitExactDeepInTheContext) {
  expect_tiles_match_per_token({{3, 64, 4993, 7, 16}, {1, 128, 4995, 5, 16}});  // context 5,000
}

// Sliding-window layers (gemma3): a window masks keys before position - window + 1. The per-token
// kernels against the float64 reference over the visible keys only, decode and chunk orders,
// every ISA; a window wider than the context changes nothing (same bits as no window); and
// the tiles (rows of one tile see different first keys) give the per-token bits.
TEST(AttentionWindow, MasksKeysBeforeTheWindow) {
  const int32_t bs = 16, hd = 64, kv_heads = 1, group = 4, n = 300;
  const int32_t nblocks = (n + bs - 1) / bs;
  Cache c(nblocks, bs, kv_heads, hd);
  std::vector<int32_t> table(nblocks);
  std::iota(table.begin(), table.end(), 0);
  fill(c, table, n, 11);
  const float scale = 1.0f / 8.0f;
  const auto q = testing::random_floats(static_cast<size_t>(group) * hd, 7, 2.0f);
  for (int32_t first_key : {1, 37, 256, 299}) {
    std::vector<float> want(q.size());
    attention_group_reference(c.view, table.data(), n, 0, q.data(), group, scale, want.data(),
                              first_key);
    for (IsaLevel isa : runnable_isas()) {
      for (bool single : {false, true}) {
        std::vector<float> got(q.size()), scratch(static_cast<size_t>(group) * n);
        attention_group(c.view, table.data(), n, 0, q.data(), group, scale, got.data(),
                        scratch.data(), isa, true, single, first_key);
        for (size_t i = 0; i < got.size(); ++i) {
          // fp16 probabilities: ~1e-3 relative to the value magnitude (~1)
          ASSERT_NEAR(got[i], want[i], 2e-3) << to_string(isa) << " first_key=" << first_key;
        }
      }
    }
  }
  // The mask is not a no-op: the last key alone (first_key = n - 1) returns its value row.
  std::vector<float> last(q.size()), scratch(static_cast<size_t>(group) * n);
  attention_group(c.view, table.data(), n, 0, q.data(), group, scale, last.data(), scratch.data(),
                  IsaLevel::kScalar, false, false, n - 1);
  const uint16_t* v = c.view.v + c.view.offset(table[(n - 1) / bs], 0, (n - 1) % bs);
  for (int32_t d = 0; d < hd; ++d) EXPECT_EQ(last[d], model::fp16_to_fp32(v[d])) << d;
}

TEST(AttentionWindow, TilesMatchPerTokenWithWindowsBitExact) {
  AttentionTileScratch scratch;
  for (const TileCase& cs : {TileCase{4, 64, 500, 40, 16, 512}, TileCase{1, 128, 600, 37, 16, 512},
                             TileCase{3, 64, 90, 30, 16, 64}, TileCase{4, 64, 0, 20, 16, 8},
                             TileCase{4, 64, 10, 20, 16, 4000}}) {
    TileSetup setup(cs);
    const auto want = setup.per_token(cs, IsaLevel::kScalar, true);
    for (IsaLevel isa : runnable_isas()) {
      const auto got = setup.tiled(cs, isa, true, scratch);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), 4 * got.size()))
          << to_string(isa) << " first=" << cs.first << " window=" << cs.window;
      ASSERT_EQ(0, std::memcmp(setup.per_token(cs, isa, true).data(), got.data(), 4 * got.size()))
          << to_string(isa) << " first=" << cs.first << " window=" << cs.window;
    }
  }
  // A window wider than every context is no window at all.
  const TileCase wide{3, 64, 100, 20, 16, 5000};
  TileCase none = wide;
  none.window = 0;
  TileSetup a(wide);
  EXPECT_EQ(a.per_token(wide, IsaLevel::kScalar, true), a.per_token(none, IsaLevel::kScalar, true));
}

// One token's result does not depend on which tile it lands in: a chunk cut into tiles of every
// size from 1 to 40 gives the same bits. The tiles run first to last, so each one's K/V rows
// extend what the previous tile of the head converted.
TEST(AttentionTiled, AnyTileSplitGivesTheSameBits) {
  const TileCase whole{3, 64, 300, 40, 16};
  TileSetup setup(whole);
  AttentionTileScratch scratch;
  for (IsaLevel isa : runnable_isas()) {
    const auto want = setup.tiled(whole, isa, true, scratch);
    for (int32_t size = 1; size <= 40; size += 3) {
      std::vector<float> got(want.size(), -1.0f);
      for (int32_t h = 0; h < TileSetup::kKvHeads; ++h) {
        ConvertedHead converted;
        for (int32_t i0 = 0; i0 < whole.num_tokens; i0 += size) {
          setup.run_tile(whole, i0, std::min(size, whole.num_tokens - i0), h, isa, true,
                         converted, scratch, got.data());
        }
      }
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), 4 * got.size()))
          << to_string(isa) << " size=" << size;
    }
  }
}

// Every attention output of a forward pass ("kqv_out", all layers, all steps), read through the
// forward tap: compared before the int8 quantization of the next matmul, which would hide a
// one-ulp difference (a token run in the wrong reduction order).
std::vector<std::vector<float>>* g_attention_outputs = nullptr;

void record_attention(const char* name, int32_t, const float* data, int64_t rows, int64_t cols,
                      int64_t ld) {
  if (g_attention_outputs == nullptr || std::strcmp(name, "kqv_out") != 0) return;
  auto& out = g_attention_outputs->emplace_back();
  for (int64_t r = 0; r < rows; ++r) out.insert(out.end(), data + r * ld, data + r * ld + cols);
}

// Runs three steps mixing prompt chunks (one starting deep in its context), generated tokens and
// a recomputed sequence whose one span holds both (its prompt's tail in chunk order, its
// generated tokens in decode order); returns every attention output and the logits.
std::vector<std::vector<float>> run_mixed_steps(const model::LlamaWeights& weights,
                                                PrefillAttentionPath path) {
  auto tokens = [](int n, int salt) {
    std::vector<int32_t> t(n);
    for (int i = 0; i < n; ++i) t[i] = (7 * i + 13 * salt) % 512;
    return t;
  };
  set_prefill_attention_path(path);
  CpuBackendConfig cfg;
  cfg.num_blocks = 160;
  cfg.num_threads = 2;
  cfg.observer = record_attention;
  CpuBackend backend(weights, cfg);  // the best level: kernels at every level are pinned above
  testing::StepHarness h(cfg.num_blocks, 16);
  h.add(1, tokens(420, 1));                                     // a long prompt in chunks
  h.add(2, tokens(42, 2), testing::StepHarness::greedy(), 40);  // prompt 40, then decode
  h.add(3, tokens(55, 3), testing::StepHarness::greedy(), 50);  // recomputed: 50 + 5
  h.add(4, tokens(21, 4));
  std::vector<std::vector<float>> outputs;
  g_attention_outputs = &outputs;
  for (const auto& work : std::vector<std::vector<std::pair<uint64_t, int32_t>>>{
           {{1, 170}, {2, 40}, {3, 55}}, {{1, 150}, {2, 1}, {4, 21}}, {{2, 1}, {1, 100}}}) {
    outputs.push_back(backend.compute_logits(h.build(work)));
  }
  g_attention_outputs = nullptr;
  set_prefill_attention_path(PrefillAttentionPath::kTiled);
  return outputs;
}

// The forward pass sends prompt tokens through tiles and generated ones through the per-token
// decode order, with the same bits as the per-token path everywhere.
TEST(AttentionTiled, ForwardMixOfPromptTilesAndGeneratedTokensMatchesPerToken) {
  model::LlamaConfig c = testing::tiny_config();
  c.n_embd = 192;
  c.n_head = 6;
  c.n_head_kv = 2;
  c.head_dim = 64;
  c.n_rot = 64;
  const auto weights = model::make_dummy_weights(c, model::TensorType::kQ4_1, 3);
  const auto want = run_mixed_steps(weights, PrefillAttentionPath::kPerToken);
  const auto got = run_mixed_steps(weights, PrefillAttentionPath::kTiled);
  ASSERT_EQ(want.size(), 3u * (c.n_layer + 1));
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_FALSE(want[i].empty()) << i;
    ASSERT_EQ(want[i].size(), got[i].size()) << i;
    ASSERT_EQ(0, std::memcmp(want[i].data(), got[i].data(), 4 * want[i].size()))
        << "output " << i << " (per step: one per layer, then the logits)";
  }
}

}  // namespace
}  // namespace troupe::gpu::cpu
