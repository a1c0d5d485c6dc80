// How far batch-1 decode is from what the memory allows (issue 21).
//
// 1. Read bandwidth of this box: a STREAM-like sum over a buffer far larger than the last-level
//    cache, with 1 thread and with the backend's thread count (each thread reads its own slice,
//    as the matmuls split weight rows). Best of several passes: the roofline is what the memory
//    can give, not what a noisy neighbour leaves.
// 2. The bytes one decode step must read: the packed weights (every matmul reads all of its
//    rows; the tied embedding/logits matrix is read once by the logits matmul) plus the KV of the
//    context at that step.
// 3. The roofline tok/s = bandwidth / bytes per step, beside the measured batch-1 decode tok/s of
//    the same process, and their ratio.
// 4. Where a batch-1 step's time goes: the forward pass's observer points (ForwardObserver) are
//    called after each op, so the time between two of them is that op's (its parallel_for and
//    barrier included); what follows the last point (the logits matmul over the vocabulary and
//    sampling) and what precedes the first (embedding, RoPE tables, scratch) is the rest of
//    run_step's time. The observer only reads the clock: it adds ~0.1 us per op.
//
//   decode_roofline_bench [--model PATH] [--threads N] [--context N] [--steps N] [--buffer-mib N]
//   decode_roofline_bench --attention-only [--context N] [--layers N]
//     5. the decode attention kernels alone, over N layers' KV (--layers 1: all in L2, what the
//        arithmetic costs; 30: the model's KV, memory-bound at long contexts)
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu/cpu/attention.hpp"
#include "gpu/cpu/cpu_backend.hpp"
#include "model/fp16.hpp"
#include "model/gguf.hpp"
#include "tests/gpu/cpu_step_harness.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using troupe::gpu::cpu::CpuBackend;
using troupe::gpu::cpu::CpuBackendConfig;
using troupe::gpu::cpu::testing::StepHarness;

// Sums a slice with four independent 256-bit accumulators: the loads, not the adds, bound it.
__attribute__((target("avx2"))) uint64_t read_slice(const std::byte* p, size_t bytes) {
  __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                    _mm256_setzero_si256()};
  const auto* v = reinterpret_cast<const __m256i*>(p);
  const size_t n = bytes / sizeof(__m256i);
  for (size_t i = 0; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) acc[k] = _mm256_add_epi64(acc[k], _mm256_load_si256(v + i + k));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(acc[0], acc[1]), _mm256_add_epi64(acc[2], acc[3]));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

// GB/s (1e9 bytes) of the best of `passes` full reads of `buffer` split over `threads` threads.
double read_bandwidth(const std::byte* buffer, size_t bytes, int threads, int passes) {
  const size_t slice = (bytes / threads) & ~size_t{127};
  double best = 0;
  std::atomic<uint64_t> sink{0};
  for (int pass = 0; pass < passes; ++pass) {
    std::vector<std::thread> pool;
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    Clock::time_point t0;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) {
        }
        sink.fetch_add(read_slice(buffer + t * slice, slice), std::memory_order_relaxed);
      });
    }
    while (ready.load() < threads) {
    }
    t0 = Clock::now();
    go.store(true, std::memory_order_release);
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(slice * threads) / s / 1e9);
  }
  if (sink.load() == 42) std::puts("");  // keeps the sums alive
  return best;
}

std::vector<int32_t> prompt_tokens(int n, int vocab) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (1000 + 7919 * i) % vocab;
  return t;
}

// Batch-1 decode tok/s after a `context`-token prompt, best of `reps` runs of `steps` steps.
double decode_batch1(CpuBackend& backend, int context, int steps, int reps) {
  double best = 0;
  for (int rep = 0; rep < reps; ++rep) {
    StepHarness h(backend.kv_geometry().num_blocks, backend.kv_geometry().block_size);
    h.add(1, prompt_tokens(context, backend.model_config().n_vocab));
    h.accept(backend.run_step(h.build({{1, context}})));
    h.accept(backend.run_step(h.build({{1, 1}})));  // warm-up
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) h.accept(backend.run_step(h.build({{1, 1}})));
    best = std::max(best, steps / std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

// Time per observer point, summed over every layer and step while `recording`.
struct OpTimes {
  bool recording = false;
  Clock::time_point last;
  std::map<std::string, double> seconds;  // by op name, in first-seen order via `order`
  std::vector<std::string> order;

  void on_point(const char* name) {
    const Clock::time_point now = Clock::now();
    if (recording) {
      auto [it, inserted] = seconds.try_emplace(name, 0.0);
      if (inserted) order.emplace_back(name);
      it->second += std::chrono::duration<double>(now - last).count();
    }
    last = now;
  }
};

// Batch-1 decode steps with the per-op clock running; prints each op's share of the step.
void profile_batch1(CpuBackend& backend, OpTimes& ops, int context, int steps) {
  StepHarness h(backend.kv_geometry().num_blocks, backend.kv_geometry().block_size);
  h.add(1, prompt_tokens(context, backend.model_config().n_vocab));
  h.accept(backend.run_step(h.build({{1, context}})));
  h.accept(backend.run_step(h.build({{1, 1}})));
  double step_seconds = 0;
  for (int i = 0; i < steps; ++i) {
    const troupe::gpu::StepBatch batch = h.build({{1, 1}});
    const auto t0 = Clock::now();
    ops.last = t0;
    ops.recording = true;
    auto result = backend.run_step(batch);
    const auto t1 = Clock::now();
    ops.recording = false;
    // From the last observer point to the end of run_step: logits matmul + sampling.
    ops.seconds["(logits matmul + sampling)"] += std::chrono::duration<double>(t1 - ops.last).count();
    step_seconds += std::chrono::duration<double>(t1 - t0).count();
    h.accept(std::move(result));
  }
  if (ops.order.empty() || ops.order.back() != "(logits matmul + sampling)") {
    ops.order.emplace_back("(logits matmul + sampling)");
  }
  std::printf("batch-1 step, %d steps at context ~%d: %.3f ms per step\n", steps, context,
              1e3 * step_seconds / steps);
  std::printf("  %-28s %9s %7s   (time up to each point; the first also holds embedding + setup)\n",
              "op (observer point)", "ms/step", "share");
  for (const std::string& name : ops.order) {
    const double s = ops.seconds[name];
    std::printf("  %-28s %9.3f %6.1f%%\n", name.c_str(), 1e3 * s / steps, 100.0 * s / step_seconds);
  }
}

// CPU time of the calling thread: on the shared box a descheduled thread's wall time says
// nothing about the kernel, its CPU time does (cache misses still count).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The decode attention kernels alone (--attention-only): one layer of SmolLM2-135M's shape (3 KV
// heads x 3 query heads, head_dim 64) at `context` keys, on one thread, over an fp16 KV arena
// of `layers` layers in shuffled 16-key blocks (far larger than L2, like the model's), per
// kernel level and per call shape: a query head per call (group 1, as the forward pass split
// before) and a GQA group per call (group 3). Best of 15 passes over every layer, in thread CPU
// time, us per layer.
void attention_kernels(int context, int layers) {
  using namespace troupe::gpu::cpu;
  constexpr int32_t kKvHeads = 3, kGroup = 3, kHeadDim = 64, kBlock = 16;
  const int32_t blocks = (context + kBlock - 1) / kBlock;
  KvLayerView kv{.num_blocks = blocks * layers,
                 .block_size = kBlock,
                 .num_kv_heads = kKvHeads,
                 .head_dim = kHeadDim};
  std::vector<uint16_t> k(kv.block_elements() * kv.num_blocks), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = troupe::model::fp32_to_fp16(static_cast<float>((i * 7919) % 2001) / 1000.0f - 1.0f);
    v[i] = troupe::model::fp32_to_fp16(static_cast<float>((i * 104729) % 2001) / 1000.0f - 1.0f);
  }
  kv.k = k.data();
  kv.v = v.data();
  std::vector<int32_t> tables(static_cast<size_t>(blocks) * layers);
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<int32_t>(i);
  std::shuffle(tables.begin(), tables.end(), std::mt19937(7));
  std::vector<float> q(kKvHeads * kGroup * kHeadDim), out(q.size()),
      scratch(static_cast<size_t>(kGroup) * context);
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = troupe::model::fp16_to_fp32(troupe::model::fp32_to_fp16(std::sin(0.37f * i)));
  }
  std::printf(
      "decode attention kernels, context %d, %d layers' KV (%.1f MB), 1 thread, CPU us per "
      "layer:\n",
      context, layers, 2.0 * k.size() * 2 / 1e6);
  for (IsaLevel isa : runnable_isas()) {
    if (isa == IsaLevel::kScalar) continue;  // ~50x slower: the reference, not a candidate
    for (int32_t group : {1, kGroup}) {
      double best = 1e30;
      for (int pass = 0; pass < 15; ++pass) {
        const double t0 = thread_cpu_seconds();
        for (int layer = 0; layer < layers; ++layer) {
          const int32_t* table = tables.data() + static_cast<size_t>(layer) * blocks;
          for (int32_t head = 0; head < kKvHeads * kGroup; head += group) {
            attention_group(kv, table, context, head / kGroup, q.data() + head * kHeadDim, group,
                            0.125f, out.data() + head * kHeadDim, scratch.data(), isa,
                            /*fp16_probabilities=*/true, /*single_token=*/true);
          }
        }
        best = std::min(best, (thread_cpu_seconds() - t0) / layers);
      }
      std::printf("  %-10s group %d per call: %8.1f us\n", std::string(to_string(isa)).c_str(),
                  group, 1e6 * best);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path model =
      std::filesystem::path(TROUPE_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (const char* env = std::getenv("TROUPE_TEST_MODEL")) model = env;
  int threads = 0, context = 128, steps = 64, layers = 30;
  size_t buffer_mib = 1024;
  bool attention_only = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--attention-only") {
      attention_only = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "option %s needs a value\n", a.c_str());
      return 2;
    }
    if (a == "--model") model = argv[i + 1];
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--context") context = std::atoi(argv[i + 1]);
    else if (a == "--steps") steps = std::atoi(argv[i + 1]);
    else if (a == "--layers") layers = std::atoi(argv[i + 1]);
    else if (a == "--buffer-mib") buffer_mib = std::strtoull(argv[i + 1], nullptr, 10);
    else { std::fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
  }
  if (attention_only) {
    attention_kernels(context, layers);
    return 0;
  }
  CpuBackendConfig cfg;
  cfg.num_threads = threads;
  cfg.num_blocks = 1024;
  OpTimes ops;
  cfg.observer = [&ops](const char* name, int32_t, const float*, int64_t, int64_t, int64_t) {
    ops.on_point(name);
  };
  auto file = std::make_shared<const troupe::model::GgufFile>(troupe::model::GgufFile::open(model));
  auto backend = CpuBackend::from_gguf(file, cfg);
  const int n = backend->num_threads();

  const size_t bytes = buffer_mib << 20;
  auto* buffer = static_cast<std::byte*>(std::aligned_alloc(4096, bytes));
  std::memset(buffer, 1, bytes);  // touch every page before timing
  const double bw1 = read_bandwidth(buffer, bytes, 1, 5);
  const double bwn = read_bandwidth(buffer, bytes, n, 5);
  std::free(buffer);

  const auto geometry = backend->kv_geometry();
  const double kv_per_token = static_cast<double>(geometry.bytes) / geometry.num_blocks / geometry.block_size;
  const double step_bytes = static_cast<double>(backend->packed_weight_bytes()) + kv_per_token * context;
  const double roofline = bwn * 1e9 / step_bytes;
  const double measured = decode_batch1(*backend, context, steps, 3);

  std::printf("model %s, %d threads, isa %s\n", model.filename().c_str(), n,
              std::string(troupe::gpu::cpu::to_string(backend->isa())).c_str());
  std::printf("read bandwidth (best of 5, %zu MiB): 1 thread %.1f GB/s, %d threads %.1f GB/s\n",
              buffer_mib, bw1, n, bwn);
  std::printf("bytes per decode step: weights %.1f MB + KV %.2f MB (context %d) = %.1f MB\n",
              backend->packed_weight_bytes() / 1e6, kv_per_token * context / 1e6, context, step_bytes / 1e6);
  std::printf("roofline %.1f tok/s (%.2f ms/token); batch-1 decode %.1f tok/s (%.2f ms/token); ratio %.2f\n",
              roofline, 1e3 / roofline, measured, 1e3 / measured, measured / roofline);
  profile_batch1(*backend, ops, context, steps);
  return 0;
}
