// The CUDA backend end to end against the CPU reference backend: logits of mixed batches
// (prefill chunks on cached prefixes + decode rows) on small dummy models of every weight type,
// chunking and batching, launch() completions, malformed batches, KV sizing, RoPE factors, the KV
// host mirror and constrained rows. Parity at the default model's shape, per type, and on the real
// model lives in cuda_parity_test.cpp; the weight upload's round trip in cuda_weights_test.cpp.
// Skips without a CUDA device; one test checks that construction fails cleanly without one.
//
// Tolerances here: the GPU runs F16/BF16 GEMMs on dequantized weights where the CPU quantizes
// activations to int8 as llama.cpp does, so logits differ by ~1e-2 relative on the tiny shape
// (checked < 3e-2 for quantized and F16 models, < 5e-2 for BF16). Greedy tokens must match except
// at near-ties (tests/gpu/parity_support.hpp).
#include "gpu/cuda/cuda_backend.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/cuda/kv_host_mirror.hpp"
#include "model/dummy_weights.hpp"
#include "model/gguf.hpp"
#include "tests/gpu/cpu_step_harness.hpp"
#include "tests/gpu/cpu_test_util.hpp"
#include "tests/gpu/cuda_test_util.hpp"
#include "tests/gpu/parity_support.hpp"
#include "tests/gpu/rope_factors_util.hpp"

namespace troupe::gpu::cuda {
namespace {

using cpu::testing::StepHarness;
using cpu::testing::tiny_config;
using cuda::testing::relative_error;
using gpu::testing::argmax;
using gpu::testing::ParityTally;
using gpu::testing::random_tokens;
using gpu::testing::run_teacher_forced;
using model::TensorType;

CudaBackendConfig small_gpu_config(int32_t num_blocks) {
  CudaBackendConfig cfg;
  cfg.num_blocks = num_blocks;
  cfg.max_num_batched_tokens = 1024;
  cfg.max_num_seqs = 32;
  return cfg;
}

std::unique_ptr<cpu::CpuBackend> cpu_backend(model::LlamaWeights w, int32_t num_blocks) {
  cpu::CpuBackendConfig cfg;
  cfg.num_blocks = num_blocks;
  return std::make_unique<cpu::CpuBackend>(std::move(w), cfg);
}

// The parity run of these tests: teacher-forced from the CPU, every step's logits within
// `max_rel_error`, greedy equal except at near-ties.
ParityTally run_parity(cpu::CpuBackend& cpu_b, CudaBackend& gpu_b,
                       const std::vector<std::vector<int32_t>>& prompts, int chunk,
                       int decode_steps, double max_rel_error, int32_t num_blocks) {
  const ParityTally t = run_teacher_forced(cpu_b, gpu_b, prompts, chunk, decode_steps, num_blocks);
  EXPECT_LT(t.worst_step_relative, max_rel_error);
  EXPECT_EQ(t.mismatches, 0) << t.first_mismatch;
  return t;
}

TEST(CudaBackendWithoutDevice, ConstructionFailsCleanly) {
  if (cuda::testing::no_device_reason().empty()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_ANY_THROW(CudaBackend(model::make_dummy_weights(tiny_config(), TensorType::kQ8_0, 1), small_gpu_config(16)));
}

class CudaLogits : public ::testing::TestWithParam<TensorType> {};

TEST_P(CudaLogits, MixedBatchesMatchCpuBackend) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const TensorType type = GetParam();
  auto cpu_b = cpu_backend(model::make_dummy_weights(tiny_config(), type, 5), 256);
  CudaBackend gpu_b(model::make_dummy_weights(tiny_config(), type, 5), small_gpu_config(256));
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) prompts.push_back(random_tokens(3 + 29 * i, 100 + i, 512));
  const double tol = type == TensorType::kBF16 ? 5e-2 : 3e-2;
  for (int chunk : {1, 7, 64}) {
    const ParityTally t = run_parity(*cpu_b, gpu_b, prompts, chunk, 6, tol, 256);
    std::printf("[ %s chunk %d ] %d rows, %d exact, %d near-ties, worst row logit rms error %.4g\n",
                std::string(model::tensor_type_name(type)).c_str(), chunk, t.rows, t.exact,
                t.near_ties, t.worst_row_rms);
    // Fresh backends per chunk size would cost seconds; KV of earlier runs is simply overwritten.
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaLogits,
                         ::testing::Values(TensorType::kQ4_1, TensorType::kQ4_0, TensorType::kQ8_0,
                                           TensorType::kF16, TensorType::kBF16, TensorType::kF32,
                                           // 128-wide rows of tiny_config fall back (Q4_K ->
                                           // Q5_0, ...); the 256-wide ffn_down stays a K-quant.
                                           TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kQ4_K,
                                           TensorType::kQ5_K, TensorType::kQ6_K),
                         [](const auto& info) { return std::string(model::tensor_type_name(info.param)); });

TEST(CudaBackend, ChunkingAndBatchingBarelyMoveLogits) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  CudaBackend gpu_b(model::make_dummy_weights(tiny_config(), TensorType::kQ4_1, 5), small_gpu_config(256));
  const auto prompt = random_tokens(70, 1, 512);
  auto last_logits = [&](int chunk, int others) {
    StepHarness h(256, 16);
    h.add(100, prompt);
    for (int o = 0; o < others; ++o) h.add(o, random_tokens(5 + 9 * o, 50 + o, 512));
    std::vector<float> out;
    for (int done = 0; done < 70; done += chunk) {
      std::vector<std::pair<uint64_t, int32_t>> work = {{100, std::min(chunk, 70 - done)}};
      for (int o = 0; o < others; ++o) {
        const int32_t left = static_cast<int32_t>(h.seq(o).tokens.size()) - h.seq(o).computed;
        if (left > 0) work.push_back({o, std::min(left, 6)});
      }
      const StepBatch b = h.build(work);
      const std::vector<float> l = gpu_b.compute_logits(b);
      int row = 0;
      for (const SequenceSlice& s : b.seqs) {
        if (!s.sample) continue;
        if (s.seq_id == 100) out.assign(l.begin() + row * 512, l.begin() + (row + 1) * 512);
        ++row;
      }
    }
    return out;
  };
  const std::vector<float> whole = last_logits(70, 0);
  for (auto [chunk, others] : {std::pair{7, 0}, {1, 0}, {70, 5}, {7, 5}}) {
    EXPECT_LT(relative_error(last_logits(chunk, others), whole), 5e-3) << "chunk " << chunk << " others " << others;
  }
}

TEST(CudaBackend, LaunchCompletesOnceOnItsOwnThreadAndReportsErrors) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  CudaBackend gpu_b(model::make_dummy_weights(tiny_config(), TensorType::kQ8_0, 5), small_gpu_config(128));
  StepHarness h(128, 16);
  model::SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.seed = 7;
  p.logprobs = true;
  p.top_logprobs = 3;
  h.add(1, random_tokens(12, 1, 512), p);
  h.add(2, random_tokens(5, 2, 512));
  const StepBatch b = h.build({{1, 12}, {2, 5}});
  std::promise<StepOutcome> promise;
  std::atomic<int> calls{0};
  std::thread::id completion_thread;
  gpu_b.launch(b, [&](StepOutcome o) {
    completion_thread = std::this_thread::get_id();
    if (calls++ == 0) promise.set_value(std::move(o));
  });
  const StepOutcome o = promise.get_future().get();
  ASSERT_TRUE(o.ok()) << o.error;
  h.accept(o.result);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_NE(completion_thread, std::this_thread::get_id());
  ASSERT_EQ(o.result.tokens.size(), 2u);
  EXPECT_EQ(o.result.tokens[0].seq_id, 1u);
  EXPECT_EQ(o.result.tokens[0].top_logprobs.size(), 3u);
  EXPECT_LE(o.result.tokens[0].logprob, 0.0f);
  EXPECT_TRUE(o.result.tokens[1].top_logprobs.empty());
  for (const SampledToken& t : o.result.tokens) EXPECT_TRUE(t.token_id >= 0 && t.token_id < 512);

  // The same seeded step on a second backend draws the same tokens.
  CudaBackend again(model::make_dummy_weights(tiny_config(), TensorType::kQ8_0, 5), small_gpu_config(128));
  const StepResult r = again.run_step(b);
  EXPECT_EQ(r.tokens[0].token_id, o.result.tokens[0].token_id);
  EXPECT_EQ(r.tokens[1].token_id, o.result.tokens[1].token_id);

  StepBatch bad = b;
  bad.token_ids[0] = 100000;
  std::promise<StepOutcome> bad_promise;
  gpu_b.launch(bad, [&](StepOutcome out) { bad_promise.set_value(std::move(out)); });
  const StepOutcome bad_outcome = bad_promise.get_future().get();
  EXPECT_FALSE(bad_outcome.ok());
  EXPECT_NE(bad_outcome.error.find("out of vocabulary"), std::string::npos) << bad_outcome.error;
  // The backend still works after a refused step.
  EXPECT_NO_THROW(gpu_b.run_step(h.build({{1, 1}, {2, 1}})));
}

TEST(CudaBackend, KvSizedFromFreeMemory) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  CudaBackendConfig cfg = small_gpu_config(0);
  cfg.gpu_memory_utilization = 0.2;
  CudaBackend gpu_b(model::make_dummy_weights(tiny_config(), TensorType::kQ4_0, 5), cfg);
  const KvCacheGeometry g = gpu_b.kv_geometry();
  EXPECT_GT(g.num_blocks, 1000);
  EXPECT_EQ(g.bytes, static_cast<int64_t>(g.num_blocks) * 2 * 2 * 2 * 16 * 32 * 2);
  std::printf("[ kv ] %d blocks, %.1f GiB at gpu_memory_utilization 0.2 on %s\n", g.num_blocks,
              static_cast<double>(g.bytes) / (1 << 30), gpu_b.device_name().c_str());
}

// cache.kv_dtype fp8_e4m3: one byte a value, so the same memory holds twice the f16 blocks, and
// the host mirror (P/D transfer) says the format and moves half the bytes a block.
TEST(CudaBackend, Fp8KvHoldsTwiceTheBlocksAndSaysItsFormat) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const auto weights = [] { return model::make_dummy_weights(tiny_config(), TensorType::kF16, 5); };
  CudaBackendConfig cfg = small_gpu_config(0);
  cfg.gpu_memory_utilization = 0.2;
  cfg.kv_dtype = KvDtype::kFp8E4M3;
  int32_t fp8_blocks = 0;
  {
    CudaBackend fp8(weights(), cfg);
    const KvCacheGeometry g = fp8.kv_geometry();
    EXPECT_EQ(g.dtype, KvDtype::kFp8E4M3);
    EXPECT_EQ(g.bytes, static_cast<int64_t>(g.num_blocks) * 2 * 2 * 2 * 16 * 32 * 1);
    fp8_blocks = g.num_blocks;
  }
  cfg.kv_dtype = KvDtype::kF16;
  int32_t f16_blocks = 0;
  {
    CudaBackend f16(weights(), cfg);
    f16_blocks = f16.kv_geometry().num_blocks;
  }
  EXPECT_NEAR(static_cast<double>(fp8_blocks) / f16_blocks, 2.0, 0.1);
  std::printf("[ kv fp8 ] %d blocks against f16's %d\n", fp8_blocks, f16_blocks);

  CudaBackendConfig mirrored = small_gpu_config(64);
  mirrored.kv_dtype = KvDtype::kFp8E4M3;
  mirrored.kv_host_mirror = true;
  CudaBackend with_mirror(weights(), mirrored);
  const std::optional<KvHostMemory> m = with_mirror.kv_host_memory();
  ASSERT_TRUE(m);
  EXPECT_EQ(m->dtype, KvDtype::kFp8E4M3);
  EXPECT_EQ(m->block_bytes, int64_t{2} * 16 * 32);  // n_kv * block_size * head_dim, a byte each
  EXPECT_THROW(
      {
        CudaBackendConfig q8 = small_gpu_config(16);
        q8.kv_dtype = KvDtype::kQ8_0;
        CudaBackend refused(weights(), q8);
      },
      std::invalid_argument);
}

// The FP8 cache end to end against the CPU backend's f16 one: E4M3 keeps 3 mantissa bits, so
// logits move more than the f16 cache's (bound 0.15 relative per step, a first estimate for the
// device check to record), and greedy agrees except at near-ties. The kernels themselves are
// compared with their CPU twins bit for bit (kv_write) and to 1e-4 (attention) in
// cuda_ops_test.cpp.
TEST(CudaBackend, Fp8KvFollowsTheCpuBackend) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  auto cpu_b = cpu_backend(model::make_dummy_weights(tiny_config(), TensorType::kF16, 5), 256);
  CudaBackendConfig cfg = small_gpu_config(256);
  cfg.kv_dtype = KvDtype::kFp8E4M3;
  CudaBackend gpu_b(model::make_dummy_weights(tiny_config(), TensorType::kF16, 5), cfg);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) prompts.push_back(random_tokens(3 + 29 * i, 100 + i, 512));
  for (int chunk : {1, 64}) {
    const ParityTally t = run_teacher_forced(*cpu_b, gpu_b, prompts, chunk, 6, 256);
    std::printf("[ fp8 kv chunk %d ] %d rows, %d exact, %d near-ties, worst step relative %.4g, "
                "worst row rms %.4g\n",
                chunk, t.rows, t.exact, t.near_ties, t.worst_step_relative, t.worst_row_rms);
    EXPECT_LT(t.worst_step_relative, 0.15);
    EXPECT_EQ(t.mismatches, 0) << t.first_mismatch;
  }
}

// Llama 3.1+ RoPE frequency factors (rope_freqs.weight, uploaded once with the weights): a tiny
// model with Meta's llama3 factors for Llama 3.2 (base 500000, so all three factor regimes occur
// at n_rot 32) gives the CPU backend's greedy tokens and logits.
TEST(CudaBackend, RopeFrequencyFactorsMatchCpuBackend) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  model::LlamaConfig c = tiny_config();
  c.rope_freq_base = 500000.0f;
  c.rope_llama3 = model::Llama3RopeScaling{32.0f, 1.0f, 4.0f, 8192};
  auto cpu_b = cpu_backend(model::make_dummy_weights(c, TensorType::kQ4_1, 5), 256);
  ASSERT_EQ(cpu_b->model_config().n_rot / 2, 16);
  CudaBackend gpu_b(model::make_dummy_weights(c, TensorType::kQ4_1, 5), small_gpu_config(256));
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) prompts.push_back(random_tokens(40 + 37 * i, 300 + i, 512));
  const ParityTally t = run_parity(*cpu_b, gpu_b, prompts, 64, 8, 3e-2, 256);
  std::printf(
      "[ rope factors Q4_1 ] %d rows, %d exact, %d near-ties, worst row logit rms error %.4g\n",
      t.rows, t.exact, t.near_ties, t.worst_row_rms);
}

// The parity above cannot tell factors from none on its own (on dummy weights they move logits
// by about the GPU-CPU error's size), so check the wiring on the GPU alone: factors of 1 change
// nothing, factors of 2 equal linear scaling by 2 (both exact in float), and llama3 factors move
// the logits as much as they move the CPU backend's. That last size is measured, not assumed: on
// a 120-token prompt at base 500000 only the slowest pairs are scaled and they have barely turned
// (issue 34: 5e-4 on the H200, where this test had assumed > 1e-3).
TEST(CudaBackend, RopeFrequencyFactorsAreAppliedOnTheDevice) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  model::LlamaConfig c = tiny_config();
  c.rope_freq_base = 500000.0f;
  const auto base = model::make_dummy_weights(c, TensorType::kQ4_1, 5);
  const auto prompt = random_tokens(120, 301, 512);
  auto step = [&] {
    StepHarness h(64, 16);
    h.add(0, prompt);
    return h.build({{0, 120}});
  };
  auto logits = [&](model::LlamaWeights w) {
    CudaBackend gpu_b(std::move(w), small_gpu_config(64));
    return gpu_b.compute_logits(step());
  };
  auto cpu_logits = [&](model::LlamaWeights w) {
    return cpu_backend(std::move(w), 64)->compute_logits(step());
  };
  using gpu::testing::with_rope_factors;
  const std::vector<float> none = logits(base);
  const std::vector<float> ones = logits(with_rope_factors(base, c, std::vector<float>(16, 1.0f)));
  const std::vector<float> twos = logits(with_rope_factors(base, c, std::vector<float>(16, 2.0f)));
  model::LlamaConfig linear = c;
  linear.rope_freq_scale = 0.5f;
  const std::vector<float> scaled = logits(with_rope_factors(base, linear, {}));
  const auto llama3_factors =
      model::llama3_rope_freq_factors(32, 500000.0f, {32.0f, 1.0f, 4.0f, 8192});
  const std::vector<float> llama3 = logits(with_rope_factors(base, c, llama3_factors));
  EXPECT_LT(relative_error(ones, none), 1e-6);
  EXPECT_LT(relative_error(twos, scaled), 1e-6);
  EXPECT_GT(relative_error(twos, none), 1e-3);
  const double cpu_effect =
      relative_error(cpu_logits(with_rope_factors(base, c, llama3_factors)), cpu_logits(base));
  const double gpu_effect = relative_error(llama3, none);
  std::printf("[ rope llama3 factors ] move the logits by %.3g on the GPU, %.3g on the CPU\n",
              gpu_effect, cpu_effect);
  ASSERT_GT(cpu_effect, 0.0);
  EXPECT_GT(gpu_effect, 0.5 * cpu_effect);
  EXPECT_LT(gpu_effect, 2.0 * cpu_effect);
}

}  // namespace
}  // namespace troupe::gpu::cuda

namespace troupe::gpu::cuda {
namespace {

// Disaggregated prefill/decode on CUDA (kv_host_mirror.hpp): the blocks a step writes are in the
// pinned mirror when it completes, and a decode backend that finds them in its own mirror (put
// there by the transport; memcpy here) and names them in kv_blocks_from_host decodes exactly as
// the backend that computed the prompt.
TEST(CudaBackend, KvMovesBetweenBackendsThroughTheHostMirror) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  CudaBackendConfig cfg = small_gpu_config(64);
  cfg.kv_host_mirror = true;
  const auto weights = [] { return model::make_dummy_weights(tiny_config(), TensorType::kQ4_1, 9); };
  CudaBackend prefill(weights(), cfg), decode(weights(), cfg), untouched(weights(), cfg);
  const std::vector<int32_t> prompt = random_tokens(40, 3, 512);  // blocks 0, 1, 2 (partial)

  StepHarness on_prefill(64, 16);
  on_prefill.add(1, prompt);
  const StepResult first = prefill.run_step(on_prefill.build({{1, 40}}));
  on_prefill.accept(first);
  const std::vector<float> want = prefill.compute_logits(on_prefill.build({{1, 1}}));

  const std::optional<KvHostMemory> from = prefill.kv_host_memory();
  const std::optional<KvHostMemory> to = decode.kv_host_memory();
  ASSERT_TRUE(from && to);
  const std::vector<int32_t> destinations = {10, 11, 12};
  for (int32_t i = 0; i < 3; ++i) {
    for (int32_t layer = 0; layer < from->num_layers; ++layer) {
      for (int64_t kv = 0; kv < 2; ++kv) {
        std::memcpy(to->base + layer * to->layer_stride + kv * to->kv_stride + destinations[i] * to->block_bytes,
                    from->base + layer * from->layer_stride + kv * from->kv_stride + i * from->block_bytes,
                    static_cast<size_t>(from->block_bytes));
      }
    }
  }
  auto decode_step = [&](CudaBackend& backend, bool name_the_blocks) {
    StepHarness on_decode(64, 16, {10, 11, 12, 13, 14, 15});
    std::vector<int32_t> tokens = prompt;
    tokens.push_back(first.tokens.at(0).token_id);
    on_decode.add(1, tokens, StepHarness::greedy(), 40);
    on_decode.seq(1).computed = 40;  // the prompt's KV came from elsewhere
    StepBatch batch = on_decode.build({{1, 1}});
    if (name_the_blocks) batch.kv_blocks_from_host = destinations;
    return backend.compute_logits(batch);
  };
  EXPECT_EQ(decode_step(decode, true), want);
  // Control: the same step on a backend whose mirror was never filled decodes something else.
  EXPECT_NE(decode_step(untouched, true), want);
}

// Structured output on the backend: the step's bitmask rows go up with its inputs and constrain
// their own rows only (the kernels themselves: cuda_token_mask_test.cpp). Each step allows a
// few random tokens and never the row's unconstrained argmax: a greedy constrained row takes the
// best allowed token of its own logits, a sampled one an allowed token, and the unconstrained
// neighbour its plain argmax. The bitmask rows are assigned out of the rows' order.
TEST(CudaBackend, ConstrainedRowsSampleOnlyAllowedTokens) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const int32_t V = 512, W = 16;
  CudaBackend gpu_b(model::make_dummy_weights(tiny_config(), TensorType::kQ8_0, 5), small_gpu_config(128));
  StepHarness h(128, 16);
  model::SamplingParams sampled;
  sampled.temperature = 1.0f;
  sampled.seed = 3;
  h.add(1, random_tokens(20, 1, V));           // greedy, constrained
  h.add(2, random_tokens(9, 2, V));            // greedy, unconstrained
  h.add(3, random_tokens(14, 3, V), sampled);  // sampled, constrained
  std::vector<std::pair<uint64_t, int32_t>> work = {{1, 20}, {2, 9}, {3, 14}};
  std::mt19937 rng(11);
  for (int step = 0; step < 6; ++step) {
    StepBatch b = h.build(work);
    const std::vector<float> logits = gpu_b.compute_logits(b);  // rows in seqs order: 1, 2, 3
    b.bitmask_num_words = W;
    b.token_bitmask.assign(2 * W, 0u);
    std::vector<std::vector<int32_t>> allowed(3);
    for (const int32_t r : {0, 2}) {
      const int32_t mask_row = r == 0 ? 1 : 0;
      const int32_t plain_best = argmax(&logits[r * V], V);
      while (allowed[r].size() < 6) {
        const auto t = static_cast<int32_t>(rng() % V);
        if (t == plain_best) continue;
        allowed[r].push_back(t);
        b.token_bitmask[mask_row * W + t / 32] |= 1u << (t % 32);
      }
      b.sampling[b.seqs[r].sampling_index].bitmask_row = mask_row;
    }
    const StepResult result = gpu_b.run_step(b);
    ASSERT_EQ(result.tokens.size(), 3u);
    int32_t best_allowed = allowed[0][0];
    for (const int32_t t : allowed[0]) {
      if (logits[t] > logits[best_allowed]) best_allowed = t;
    }
    EXPECT_EQ(result.tokens[0].token_id, best_allowed) << "step " << step;
    EXPECT_EQ(result.tokens[1].token_id, argmax(&logits[V], V)) << "step " << step;
    EXPECT_NE(std::find(allowed[2].begin(), allowed[2].end(), result.tokens[2].token_id), allowed[2].end())
        << "step " << step << ": sampled " << result.tokens[2].token_id;
    h.accept(result);
    work = {{1, 1}, {2, 1}, {3, 1}};
  }
  // A bitmask row past the step's bitmask is refused, not read out of bounds.
  StepBatch bad = h.build(work);
  bad.bitmask_num_words = W;
  bad.token_bitmask.assign(W, ~0u);
  bad.sampling[0].bitmask_row = 1;
  try {
    gpu_b.run_step(bad);
    FAIL() << "a bitmask_row past the bitmask was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bitmask_row out of range"), std::string::npos) << e.what();
  }
}

TEST(KvHostMirror, BlocksWrittenByAStepAreThoseHoldingItsSpans) {
  StepHarness h(64, 16, {7, 3, 9, 20, 21});
  h.add(1, random_tokens(40, 1, 512));
  h.add(2, random_tokens(5, 2, 512));
  StepBatch b = h.build({{1, 20}, {2, 5}});  // 1: blocks 7, 3 (positions 0-19); 2: block 9
  EXPECT_EQ(blocks_written_by(b, 16), (std::vector<int32_t>{3, 7, 9}));
  b = h.build({{1, 20}});                     // positions 20-39: blocks 3 and 20
  EXPECT_EQ(blocks_written_by(b, 16), (std::vector<int32_t>{3, 20}));
}

}  // namespace
}  // namespace troupe::gpu::cuda
