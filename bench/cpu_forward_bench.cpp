// CPU backend throughput: prompt processing (512 tokens) and decode at batch 1/4/16/64 on the
// default model, decode at batch 1 on dummy Llama-3.2-1B Q4_0, and the K-quant lines: dummy
// SmolLM2-135M in the Q4_K_M-like mix at batch 1 and 16 (its 576-wide rows fall back to Q5_0 /
// Q8_0 as llama.cpp's quantizer does, so it has the real file's types), dummy Llama-3.2-1B all
// Q4_K at batch 1. Prints tokens/s and the
// hypervisor's `steal` share of CPU time during each run (repeat runs that had steal).
//
//   cpu_forward_bench [--model PATH] [--threads N] [--decode-steps N] [--skip-dummy]
//                     [--skip-prompt] [--skip-kquant] [--batches 1,4,16,64] [--sample]
//                     [--context N] [--kv-dtype f16|q8_0] [--num-blocks N]
// Each line also gives the process CPU time per token: on a shared, loaded host it moves less
// than wall time (compare builds back to back either way).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "gpu/cpu/cpu_backend.hpp"
#include "model/dummy_weights.hpp"
#include "model/gguf.hpp"
#include "tests/gpu/cpu_step_harness.hpp"

namespace {

using troupe::gpu::StepBatch;
using troupe::gpu::cpu::CpuBackend;
using troupe::gpu::cpu::CpuBackendConfig;
using troupe::gpu::cpu::testing::StepHarness;

struct CpuTimes {
  unsigned long long total = 0, steal = 0;
};

CpuTimes read_cpu_times() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  unsigned long long v[10] = {};
  f >> cpu;
  for (auto& x : v) f >> x;
  CpuTimes t;
  for (int i = 0; i < 8; ++i) t.total += v[i];
  t.steal = v[7];
  return t;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Run {
  double seconds = 0;
  double cpu_seconds = 0;
  double steal_pct = 0;
};

template <typename Fn>
Run timed(Fn&& fn) {
  const CpuTimes a = read_cpu_times();
  const double c0 = process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  const auto t1 = std::chrono::steady_clock::now();
  const double c1 = process_cpu_seconds();
  const CpuTimes b = read_cpu_times();
  Run r;
  r.seconds = std::chrono::duration<double>(t1 - t0).count();
  r.cpu_seconds = c1 - c0;
  const double total = static_cast<double>(b.total - a.total);
  r.steal_pct = total > 0 ? 100.0 * static_cast<double>(b.steal - a.steal) / total : 0.0;
  return r;
}

std::vector<int32_t> prompt_tokens(int n, int vocab, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (1000 + 7919 * (i + 31 * salt)) % vocab;
  return t;
}

void report(const char* what, int tokens, const Run& r) {
  std::printf("%-44s %8.1f tok/s   (%d tokens in %.3f s, cpu %.2f ms/tok, steal %.1f%%)\n",
              what, tokens / r.seconds, tokens, r.seconds, 1e3 * r.cpu_seconds / tokens,
              r.steal_pct);
  std::fflush(stdout);
}

void bench_prompt(CpuBackend& backend, int n, int reps) {
  const int vocab = backend.model_config().n_vocab;
  for (int rep = 0; rep < reps; ++rep) {
    StepHarness h(backend.kv_geometry().num_blocks, backend.kv_geometry().block_size);
  h.set_kv_groups(backend.kv_geometry().num_kv_groups, backend.kv_geometry().sliding_window);
    h.add(1, prompt_tokens(n, vocab, rep));
    const StepBatch b = h.build({{1, n}});
    const Run r = timed([&] { backend.run_step(b); });
    char label[64];
    std::snprintf(label, sizeof label, "prompt processing pp%d (rep %d)", n, rep);
    report(label, n, r);
  }
}

// Greedy, or with --sample the server's default sampler (temperature 0.8, top-k 40, top-p 0.95)
// plus 5 top logprobs and a logit_bias entry: what a chat client asks for.
bool g_sample = false;

troupe::model::SamplingParams bench_params() {
  troupe::model::SamplingParams p;
  if (!g_sample) {
    p.temperature = 0.0f;
    return p;
  }
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.logprobs = true;
  p.top_logprobs = 5;
  p.logit_bias.push_back({.token_id = 1, .bias = -100.0f});
  return p;
}

// --context N: decode after N tokens of context (0: after a 32-token prompt, computed). Past 32
// the context's KV is not computed, only its pages taken (what attention reads costs the same
// whatever the values; a long prefill of every sequence would take minutes).
int g_context = 0;

void bench_decode(CpuBackend& backend, int batch, int steps, const char* model) {
  const int vocab = backend.model_config().n_vocab;
  StepHarness h(backend.kv_geometry().num_blocks, backend.kv_geometry().block_size);
  h.set_kv_groups(backend.kv_geometry().num_kv_groups, backend.kv_geometry().sliding_window);
  std::vector<std::pair<uint64_t, int32_t>> prefill, decode;
  const int32_t context = std::max(g_context, 32);
  for (int s = 0; s < batch; ++s) {
    h.add(s, prompt_tokens(context, vocab, s), bench_params());
    prefill.push_back({s, g_context > 32 ? context - 1 : context});
    decode.push_back({s, 1});
  }
  if (g_context > 32) {
    h.build(prefill);  // pages taken, KV left as it is
  } else {
    h.accept(backend.run_step(h.build(prefill)));
  }
  h.accept(backend.run_step(h.build(decode)));  // warm-up (after --context: the last prompt token)
  const Run r = timed([&] {
    for (int i = 0; i < steps; ++i) h.accept(backend.run_step(h.build(decode)));
  });
  char label[96];
  std::snprintf(label, sizeof label, "decode %s batch %d%s ctx %d (aggregate)", model, batch,
                g_sample ? " sampled" : "", context);
  report(label, batch * steps, r);
}

}  // namespace

// K-quant weights on the CPU backend (see the file comment).
void bench_kquant(CpuBackendConfig cfg) {
  using troupe::model::DummyMix;
  using troupe::model::TensorType;
  cfg.num_blocks = 1024;
  {
    troupe::model::DummyWeightsSpec spec{"smollm2-135m", TensorType::kQ4_K, 1};
    spec.mix = DummyMix::kQ4_K_M;
    CpuBackend backend(troupe::model::make_dummy_weights(spec), cfg);
    std::printf("dummy smollm2-135m Q4_K_M-like (packed weights %.1f MiB)\n",
                backend.packed_weight_bytes() / 1048576.0);
    for (int batch : {1, 16}) bench_decode(backend, batch, 16, "dummy smollm2-135m Q4_K_M-like");
  }
  {
    cfg.num_blocks = 256;
    CpuBackend backend(troupe::model::make_dummy_weights({"llama-3.2-1b", TensorType::kQ4_K, 1}), cfg);
    std::printf("dummy llama-3.2-1b Q4_K (packed weights %.1f MiB)\n", backend.packed_weight_bytes() / 1048576.0);
    bench_decode(backend, 1, 16, "dummy llama-3.2-1b Q4_K");
  }
}

int main(int argc, char** argv) {
  std::filesystem::path model =
      std::filesystem::path(TROUPE_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (const char* env = std::getenv("TROUPE_TEST_MODEL")) model = env;
  int threads = 0, steps = 32;
  bool dummy = true, prompt = true, kquant = true;
  std::vector<int> batches = {1, 4, 16, 64};
  troupe::gpu::KvDtype kv_dtype = troupe::gpu::KvDtype::kF16;
  int num_blocks = 4096;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) model = argv[++i];
    else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--decode-steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--skip-dummy") dummy = false;
    else if (a == "--skip-prompt") prompt = false;
    else if (a == "--skip-kquant") kquant = false;
    else if (a == "--sample") g_sample = true;
    else if (a == "--context" && i + 1 < argc) g_context = std::atoi(argv[++i]);
    else if (a == "--kv-dtype" && i + 1 < argc) {
      kv_dtype = troupe::gpu::kKvDtypeNames.parse(argv[++i]).value_or(troupe::gpu::KvDtype::kF16);
    } else if (a == "--num-blocks" && i + 1 < argc) num_blocks = std::atoi(argv[++i]);
    else if (a == "--batches" && i + 1 < argc) {
      batches.clear();
      for (const char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        batches.push_back(static_cast<int>(std::strtol(p, &end, 10)));
        p = *end == ',' ? end + 1 : end;
        if (end == p && *p != '\0') break;
      }
    }
  }
  CpuBackendConfig cfg;
  cfg.num_threads = threads;
  cfg.num_blocks = num_blocks;
  cfg.kv_dtype = kv_dtype;
  {
    auto file = std::make_shared<const troupe::model::GgufFile>(troupe::model::GgufFile::open(model));
    auto backend = CpuBackend::from_gguf(file, cfg);
    std::printf("model %s, %d threads, isa %s, packed weights %.1f MiB, KV %s (%d blocks)\n",
                model.filename().c_str(), backend->num_threads(),
                std::string(troupe::gpu::cpu::to_string(backend->isa())).c_str(),
                backend->packed_weight_bytes() / 1048576.0,
                std::string(troupe::gpu::kKvDtypeNames.name(kv_dtype)).c_str(), num_blocks);
    if (prompt) bench_prompt(*backend, 512, 3);
    const std::string name = model.stem().string();
    for (int batch : batches) bench_decode(*backend, batch, batch >= 16 ? steps / 2 : steps, name.c_str());
  }
  if (dummy) {
    cfg.num_blocks = 256;
    const auto t0 = std::chrono::steady_clock::now();
    CpuBackend backend(troupe::model::make_dummy_weights({"llama-3.2-1b", troupe::model::TensorType::kQ4_0, 1}), cfg);
    std::printf("dummy llama-3.2-1b Q4_0 ready in %.1f s (packed weights %.1f MiB)\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                backend.packed_weight_bytes() / 1048576.0);
    bench_decode(backend, 1, 16, "dummy llama-3.2-1b Q4_0");
  }
  if (kquant) bench_kquant(cfg);
  return 0;
}
