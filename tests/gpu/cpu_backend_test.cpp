// CPU backend end to end on dummy weights (small shapes, every weight type): batch invariance
// (alone vs in a batch of 8 vs chunked prefill 1/7/64), scattered vs contiguous KV blocks,
// launch() completions, interrupted steps, malformed batches.
#include "gpu/cpu/cpu_backend.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <random>

#include "model/dummy_weights.hpp"
#include "tests/gpu/cpu_step_harness.hpp"
#include "tests/gpu/cpu_test_util.hpp"

namespace troupe::gpu::cpu {
namespace {

using model::TensorType;
using testing::StepHarness;
using testing::tiny_config;

// K-quants need rows of 256: the same tiny model, twice as wide, so every matrix is of `type`.
model::LlamaConfig tiny_config_for(TensorType type) {
  model::LlamaConfig c = tiny_config();
  if (type == TensorType::kQ4_K || type == TensorType::kQ5_K || type == TensorType::kQ6_K) {
    c.n_embd = 256;
    c.head_dim = 64;
    c.n_rot = 64;
    c.n_ff = 512;
  }
  return c;
}

std::unique_ptr<CpuBackend> tiny_backend(TensorType type, int32_t num_blocks = 128) {
  CpuBackendConfig cfg;
  cfg.num_blocks = num_blocks;
  cfg.num_threads = 2;
  return std::make_unique<CpuBackend>(model::make_dummy_weights(tiny_config_for(type), type, 5), cfg);
}

std::vector<int32_t> random_tokens(int n, uint32_t seed, int vocab = 512) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

// Index of `id`'s row among the sampling rows of `b`.
int sampling_row(const StepBatch& b, uint64_t id) {
  int row = 0;
  for (const SequenceSlice& s : b.seqs) {
    if (s.seq_id == id) return s.sample ? row : -1;
    row += s.sample;
  }
  return -1;
}

int32_t argmax(const float* v, int n) {
  return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

// One launch(), its outcome once the completion ran.
StepOutcome launch_and_wait(CpuBackend& backend, StepBatch batch) {
  std::promise<StepOutcome> promise;
  backend.launch(std::move(batch), [&](StepOutcome o) { promise.set_value(std::move(o)); });
  return promise.get_future().get();
}

constexpr uint64_t kTarget = 100;
constexpr int kPromptLen = 70;
constexpr int kDecodeSteps = 4;

// Runs the target sequence's prompt with the given chunk size, with `others` other sequences
// in every step (each doing a prefill chunk or a decode token), then kDecodeSteps greedy decode
// steps; returns the target's logits after the prompt and after each decode step.
std::vector<std::vector<float>> run_target(CpuBackend& backend, StepHarness& h, int chunk,
                                           int others) {
  const int V = backend.model_config().n_vocab;
  h.add(kTarget, random_tokens(kPromptLen, 1, V));
  for (int o = 0; o < others; ++o) h.add(o, random_tokens(5 + 9 * o, 50 + o, V));
  std::vector<std::vector<float>> out;
  auto step = [&](std::vector<std::pair<uint64_t, int32_t>> work) {
    for (int o = 0; o < others; ++o) {
      auto& s = h.seq(o);
      const int32_t left = static_cast<int32_t>(s.tokens.size()) - s.computed;
      work.insert(work.begin() + (o % 2 ? 0 : static_cast<long>(work.size())), {o, std::min(left, 6)});
    }
    const StepBatch b = h.build(work);
    const std::vector<float> logits = backend.compute_logits(b);
    // Greedy-extend every sampling sequence so the others keep decoding.
    StepResult r;
    for (const SequenceSlice& s : b.seqs) {
      if (!s.sample) continue;
      const int row = sampling_row(b, s.seq_id);
      r.tokens.push_back({s.seq_id, argmax(&logits[static_cast<size_t>(row) * V], V), 0.0f, {}});
      if (s.seq_id == kTarget) {
        out.emplace_back(logits.begin() + static_cast<long>(row) * V,
                         logits.begin() + static_cast<long>(row + 1) * V);
      }
    }
    h.accept(r);
  };
  for (int done = 0; done < kPromptLen; done += chunk) step({{kTarget, std::min(chunk, kPromptLen - done)}});
  for (int i = 0; i < kDecodeSteps; ++i) step({{kTarget, 1}});
  return out;
}

class BatchInvariance : public ::testing::TestWithParam<TensorType> {};

TEST_P(BatchInvariance, LogitsBitIdenticalAloneInBatchAndChunked) {
  std::vector<std::vector<float>> alone;
  {
    auto backend = tiny_backend(GetParam());
    StepHarness h(128, 16);
    alone = run_target(*backend, h, kPromptLen, 0);
  }
  ASSERT_EQ(alone.size(), 1u + kDecodeSteps);
  struct Variant {
    int chunk, others;
  };
  // Any chunking, 1-token chunks included: the attention order is keyed on whether a token is
  // prompt or generated (SequenceSlice::num_prompt_tokens), not on the size of its span.
  // 69 leaves a 1-token remainder, as a prefix-cache hit on all but the last token does.
  for (const Variant v : {Variant{kPromptLen, 7}, Variant{1, 0}, Variant{2, 0}, Variant{7, 0},
                          Variant{64, 0}, Variant{kPromptLen - 1, 0}, Variant{7, 7}, Variant{1, 7}}) {
    auto backend = tiny_backend(GetParam());
    std::vector<int32_t> order(128);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(v.chunk));
    StepHarness h(128, 16, order);
    const auto got = run_target(*backend, h, v.chunk, v.others);
    ASSERT_EQ(got.size(), alone.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(0, std::memcmp(got[i].data(), alone[i].data(), 4 * got[i].size()))
          << "chunk " << v.chunk << " others " << v.others << " logits row " << i;
    }
  }
}

// A preempted sequence is recomputed from scratch, generated tokens included, in prefill chunks:
// its next logits must equal those it would have had without the preemption.
TEST_P(BatchInvariance, RecomputeAfterPreemptionIsBitIdentical) {
  std::vector<std::vector<float>> uninterrupted;
  std::vector<int32_t> tokens;
  {
    auto backend = tiny_backend(GetParam());
    StepHarness h(128, 16);
    uninterrupted = run_target(*backend, h, kPromptLen, 0);
    tokens = h.seq(kTarget).tokens;  // prompt + kDecodeSteps + 1 generated
  }
  tokens.pop_back();  // the last sampled token is not computed yet: its logits are the target
  for (const int chunk : {static_cast<int>(tokens.size()), 16, 1}) {
    auto backend = tiny_backend(GetParam());
    StepHarness h(128, 16);
    h.add(kTarget, tokens, StepHarness::greedy(), kPromptLen);
    const int V = backend->model_config().n_vocab;
    std::vector<float> logits;
    for (int done = 0; done < static_cast<int>(tokens.size()); done += chunk) {
      const StepBatch b = h.build({{kTarget, std::min(chunk, static_cast<int>(tokens.size()) - done)}});
      logits = backend->compute_logits(b);
    }
    ASSERT_EQ(logits.size(), static_cast<size_t>(V));
    ASSERT_EQ(0, std::memcmp(logits.data(), uninterrupted.back().data(), 4 * logits.size()))
        << "recomputed in chunks of " << chunk;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, BatchInvariance,
                         ::testing::Values(TensorType::kQ4_1, TensorType::kQ4_0, TensorType::kQ8_0,
                                           TensorType::kF16, TensorType::kBF16, TensorType::kF32,
                                           TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K,
                                           TensorType::kQ5_0, TensorType::kQ5_1),
                         [](const auto& info) { return std::string(model::tensor_type_name(info.param)); });

TEST(CpuBackend, ScatteredBlocksEqualContiguous) {
  auto a = tiny_backend(TensorType::kQ4_1);
  auto b = tiny_backend(TensorType::kQ4_1);
  StepHarness ha(128, 16);
  StepHarness hb(128, 16, {97, 3, 64, 12, 5, 120, 33, 8});
  const auto prompt = random_tokens(100, 9);
  ha.add(1, prompt);
  hb.add(1, prompt);
  const auto la = a->compute_logits(ha.build({{1, 100}}));
  const auto lb = b->compute_logits(hb.build({{1, 100}}));
  ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), 4 * la.size()));
}

TEST(CpuBackend, ScalarAndSimdPathsAgreeClosely) {
  CpuBackendConfig cfg;
  cfg.num_blocks = 16;
  cfg.isa = IsaLevel::kScalar;
  CpuBackend scalar(model::make_dummy_weights(tiny_config(), TensorType::kQ4_1, 5), cfg);
  auto simd = tiny_backend(TensorType::kQ4_1, 16);
  StepHarness h1(16, 16), h2(16, 16);
  h1.add(1, random_tokens(40, 3));
  h2.add(1, random_tokens(40, 3));
  const auto a = scalar.compute_logits(h1.build({{1, 40}}));
  const auto b = simd->compute_logits(h2.build({{1, 40}}));
  // Matmuls are bit-exact across ISAs; exp/RMSNorm/attention reductions differ in the last bits.
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-3 * (1 + std::fabs(a[i])));
}

TEST(CpuBackend, LaunchCompletesOnceWithRunStepResult) {
  auto backend = tiny_backend(TensorType::kQ8_0);
  auto sync_backend = tiny_backend(TensorType::kQ8_0);
  StepHarness h1(128, 16), h2(128, 16);
  for (uint64_t id = 0; id < 3; ++id) {
    model::SamplingParams p;
    p.temperature = 0.8f;
    p.top_k = 40;
    p.seed = id + 7;
    p.logprobs = true;
    p.top_logprobs = 3;
    h1.add(id, random_tokens(10 + 3 * id, id), p);
    h2.add(id, random_tokens(10 + 3 * id, id), p);
  }
  for (int step = 0; step < 3; ++step) {
    std::vector<std::pair<uint64_t, int32_t>> work;
    for (uint64_t id = 0; id < 3; ++id) {
      work.push_back({id, static_cast<int32_t>(h1.seq(id).tokens.size()) - h1.seq(id).computed});
    }
    const StepBatch b1 = h1.build(work);
    const StepBatch b2 = h2.build(work);
    std::promise<StepOutcome> promise;
    std::atomic<int> calls{0};
    backend->launch(b1, [&](StepOutcome o) {
      calls++;
      promise.set_value(std::move(o));
    });
    const StepOutcome o = promise.get_future().get();
    ASSERT_TRUE(o.ok()) << o.error;
    EXPECT_EQ(calls.load(), 1);
    const StepResult want = sync_backend->run_step(b2);
    ASSERT_EQ(o.result.tokens.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(o.result.tokens[i].seq_id, want.tokens[i].seq_id);
      EXPECT_EQ(o.result.tokens[i].token_id, want.tokens[i].token_id);
      EXPECT_EQ(o.result.tokens[i].logprob, want.tokens[i].logprob);
      EXPECT_EQ(o.result.tokens[i].top_logprobs.size(), 3u);
      EXPECT_LE(o.result.tokens[i].logprob, 0.0f);
    }
    h1.accept(o.result);
    h2.accept(want);
  }
}

// First-token interrupts (gpu::StepInterrupt): six layers; the test asks for the interrupt when
// layer `ask_after_layer` has finished. Asked before layer 3 (the first half), the step is given
// up: no tokens, and running it again — over the KV it half wrote — gives exactly the tokens of
// a backend that never saw it. Asked later, the step runs to its end.
TEST(CpuBackend, AStepIsGivenUpOnlyInItsFirstHalfAndItsRetryIsBitIdentical) {
  model::LlamaConfig config = tiny_config();
  config.n_layer = 6;
  std::shared_ptr<StepInterrupt> interrupt;
  int ask_after_layer = -1;
  CpuBackendConfig cfg;
  cfg.num_blocks = 64;
  cfg.num_threads = 2;
  cfg.observer = [&](const char* name, int32_t layer, const float*, int64_t, int64_t, int64_t) {
    if (interrupt && layer == ask_after_layer && std::strcmp(name, "l_out") == 0) interrupt->request();
  };
  CpuBackend backend(model::make_dummy_weights(config, TensorType::kQ4_1, 5), cfg);
  CpuBackendConfig plain_cfg = cfg;
  plain_cfg.observer = nullptr;
  CpuBackend reference(model::make_dummy_weights(config, TensorType::kQ4_1, 5), plain_cfg);
  StepHarness h(64, 16), hr(64, 16);
  for (uint64_t id = 0; id < 3; ++id) {
    model::SamplingParams p;
    p.logprobs = true;
    h.add(id, random_tokens(12 + 5 * static_cast<int>(id), 20 + static_cast<uint32_t>(id)), p);
    hr.add(id, random_tokens(12 + 5 * static_cast<int>(id), 20 + static_cast<uint32_t>(id)), p);
  }
  auto work = [&](StepHarness& harness) {
    std::vector<std::pair<uint64_t, int32_t>> w;
    for (uint64_t id = 0; id < 3; ++id) {
      w.push_back({id, static_cast<int32_t>(harness.seq(id).tokens.size()) - harness.seq(id).computed});
    }
    return w;
  };
  for (int step = 0; step < 4; ++step) {
    const StepBatch batch = h.build(work(h));
    if (step == 1 || step == 2) {
      // Given up: asked before the first layer, and after layer 1 of 6.
      interrupt = std::make_shared<StepInterrupt>();
      ask_after_layer = step == 1 ? -1 : 1;
      if (step == 1) interrupt->request();
      StepBatch interrupted = batch;
      interrupted.interrupt = interrupt;
      const StepOutcome given_up = launch_and_wait(backend, interrupted);
      ASSERT_TRUE(given_up.ok()) << given_up.error;
      EXPECT_TRUE(given_up.interrupted) << "step " << step;
      EXPECT_EQ(given_up.result.step_id, batch.step_id);
      EXPECT_TRUE(given_up.result.tokens.empty());
    }
    StepBatch retried = batch;
    if (step == 3) {
      // Asked after layer 2 of 6: past half, the step finishes.
      interrupt = std::make_shared<StepInterrupt>();
      ask_after_layer = 2;
      retried.interrupt = interrupt;
    }
    const StepOutcome o = launch_and_wait(backend, retried);
    ASSERT_TRUE(o.ok()) << o.error;
    EXPECT_FALSE(o.interrupted) << "step " << step;
    if (step == 3) {
      EXPECT_TRUE(interrupt->requested());
    }
    const StepResult want = reference.run_step(hr.build(work(hr)));
    ASSERT_EQ(o.result.tokens.size(), want.tokens.size());
    for (size_t i = 0; i < want.tokens.size(); ++i) {
      EXPECT_EQ(o.result.tokens[i].token_id, want.tokens[i].token_id) << "step " << step;
      EXPECT_EQ(o.result.tokens[i].logprob, want.tokens[i].logprob) << "step " << step;
    }
    h.accept(o.result);
    hr.accept(want);
  }
}

TEST(CpuBackend, MalformedBatchIsAnErrorNotACrash) {
  auto backend = tiny_backend(TensorType::kQ4_0, 8);
  StepHarness h(8, 16);
  h.add(1, random_tokens(20, 1));
  StepBatch good = h.build({{1, 20}});
  auto expect_bad = [&](StepBatch b) {
    EXPECT_THROW(backend->run_step(b), std::invalid_argument);
    EXPECT_FALSE(launch_and_wait(*backend, std::move(b)).ok());
  };
  StepBatch b = good;
  b.token_ids[3] = 100000;
  expect_bad(b);
  b = good;
  b.block_tables[1] = 8;
  expect_bad(b);
  b = good;
  b.seqs[0].context_len = 25;
  expect_bad(b);
  b = good;
  b.positions.pop_back();
  expect_bad(b);
  EXPECT_NO_THROW(backend->run_step(good));
}

TEST(CpuBackend, KvGeometryFromMemoryBudget) {
  CpuBackendConfig cfg;
  cfg.kv_memory_bytes = 1 << 20;
  CpuBackend backend(model::make_dummy_weights(tiny_config(), TensorType::kQ4_0, 1), cfg);
  // 2 layers x K,V x 2 kv heads x 16 slots x 32 dims x 2 bytes = 8 KiB per block.
  EXPECT_EQ(backend.kv_geometry().num_blocks, 128);
  EXPECT_EQ(backend.kv_geometry().block_size, 16);
  EXPECT_EQ(backend.kv_geometry().bytes, 1 << 20);
  EXPECT_EQ(backend.name(), "cpu");
}

}  // namespace
}  // namespace troupe::gpu::cpu
