// CUDA backend benchmark (issue 8), run by bench/device_check.sh on the device machine: the
// device-to-device copy bandwidth (the roofline's ceiling), then per model prefill tokens/s and
// the decode step time at batch 1, 16, 64 and 256 with ~512 tokens of context per sequence, the
// bytes a decode step must read (GEMM weights + the KV of every context + the logits rows) and
// the achieved bandwidth against the measured copy bandwidth and the nominal 4.3 TB/s.
//
//   cuda_decode_bench [--models default,llama-3-8b] [--context 512] [--steps 20]
//
// Models: "default" = smollm2-135m shape with dummy Q4_1 weights (the default model's shape and
// type), "real" = the GGUF at $TROUPE_TEST_MODEL or models/ (skipped when absent), or any named
// dummy shape with ":TYPE" (e.g. llama-3-8b:BF16; bare llama-3-8b means BF16).
// Prints one line per measurement as it goes and a table last. Numbers only, no assertions.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/cuda/cuda_backend.hpp"
#include "gpu/cuda/cuda_check.cuh"
#include "model/dummy_weights.hpp"
#include "model/gguf.hpp"

namespace {

using troupe::gpu::SamplingSlot;
using troupe::gpu::SequenceSlice;
using troupe::gpu::StepBatch;
using troupe::gpu::cuda::CudaBackend;
using troupe::gpu::cuda::CudaBackendConfig;
namespace model = troupe::model;

constexpr double kNominalBandwidth = 4.3e12;  // bytes/s, device copy measured on this H200 kind

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

double copy_bandwidth() {
  const size_t bytes = size_t{2} << 30;
  void *a = nullptr, *b = nullptr;
  CUDA_CHECK(cudaMalloc(&a, bytes));
  CUDA_CHECK(cudaMalloc(&b, bytes));
  CUDA_CHECK(cudaMemset(a, 0x5A, bytes));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> times;
  for (int i = 0; i < 13; ++i) {
    CUDA_CHECK(cudaEventRecord(start));
    CUDA_CHECK(cudaMemcpy(i % 2 ? a : b, i % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (i >= 3) times.push_back(ms);
  }
  cudaFree(a);
  cudaFree(b);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 2.0 * static_cast<double>(bytes) / (median(times) * 1e-3);  // read + write
}

// Sequences with their tokens and blocks, a minimal scheduler for the benchmark.
struct Seq {
  std::vector<int32_t> tokens;
  int32_t computed = 0;
  std::vector<int32_t> blocks;
};

struct Row {
  std::string model;
  std::string what;
  int batch = 0;
  double context = 0;
  double wall_ms = 0;
  double device_ms = 0;
  double tokens_per_s = 0;
  double bytes = 0;
};

class Runner {
 public:
  Runner(CudaBackend& b) : backend_(b), block_size_(b.kv_geometry().block_size) {}

  void add(std::vector<int32_t> prompt) { seqs_.push_back(Seq{std::move(prompt), 0, {}}); }

  // One step over `work` = (seq index, tokens); every span that reaches its end samples greedily.
  StepBatch build(const std::vector<std::pair<int, int32_t>>& work) {
    StepBatch b;
    b.step_id = next_step_++;
    int32_t max_blocks = 0;
    for (auto [i, n] : work) {
      Seq& s = seqs_[i];
      while (static_cast<int32_t>(s.blocks.size()) * block_size_ < s.computed + n) s.blocks.push_back(next_block_++);
      max_blocks = std::max(max_blocks, static_cast<int32_t>(s.blocks.size()));
    }
    b.max_blocks_per_seq = max_blocks;
    for (auto [i, n] : work) {
      Seq& s = seqs_[i];
      SequenceSlice slice;
      slice.seq_id = static_cast<uint64_t>(i);
      slice.token_offset = b.num_tokens();
      slice.num_tokens = n;
      slice.context_len = s.computed + n;
      slice.block_table_row = static_cast<int32_t>(b.seqs.size());
      for (int32_t k = 0; k < n; ++k) {
        b.token_ids.push_back(s.tokens[s.computed + k]);
        b.positions.push_back(s.computed + k);
      }
      std::vector<int32_t> row = s.blocks;
      row.resize(max_blocks, -1);
      b.block_tables.insert(b.block_tables.end(), row.begin(), row.end());
      slice.sample = slice.context_len == static_cast<int32_t>(s.tokens.size());
      if (slice.sample) {
        SamplingSlot slot;
        slot.params.temperature = 0.0f;
        slice.sampling_index = static_cast<int32_t>(b.sampling.size());
        b.sampling.push_back(slot);
      }
      b.seqs.push_back(slice);
      s.computed += n;
    }
    return b;
  }

  void run(const StepBatch& b) {
    const troupe::gpu::StepResult r = backend_.run_step(b);
    for (const auto& t : r.tokens) seqs_[t.seq_id].tokens.push_back(t.token_id);
  }
  Seq& seq(int i) { return seqs_[i]; }
  int32_t blocks_used() const { return next_block_; }

 private:
  CudaBackend& backend_;
  int32_t block_size_;
  std::vector<Seq> seqs_;
  int32_t next_block_ = 0;
  uint64_t next_step_ = 1;
};

std::vector<Row> bench_model(const std::string& label, model::LlamaWeights weights, int context, int steps) {
  std::vector<Row> rows;
  const auto t0 = std::chrono::steady_clock::now();
  CudaBackendConfig cfg;
  cfg.max_num_batched_tokens = 8192;
  cfg.max_num_seqs = 256;
  CudaBackend backend(std::move(weights), cfg);
  const model::LlamaConfig& c = backend.model_config();
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: loaded on %s in %.1f s, GEMM weights %.2f GiB (%s), KV %d blocks (%.1f GiB)\n", label.c_str(),
              backend.device_name().c_str(), load_s, backend.gemm_weight_bytes() / 1073741824.0,
              backend.compute_type() == troupe::gpu::cuda::ActType::kBF16 ? "BF16" : "F16",
              backend.kv_geometry().num_blocks, backend.kv_geometry().bytes / 1073741824.0);
  std::fflush(stdout);
  const int max_batch = 256;
  Runner runner(backend);
  std::mt19937 rng(1);
  for (int i = 0; i < max_batch; ++i) {
    std::vector<int32_t> prompt(context);
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % c.n_vocab);
    runner.add(std::move(prompt));
  }
  // Prefill: 8192-token steps of whole prompts (warm-up with the first step).
  const int per_step = std::max(1, 8192 / context);
  std::vector<double> prefill_ms;
  int64_t prefill_tokens = 0;
  double prefill_total_ms = 0;
  for (int first = 0; first < max_batch; first += per_step) {
    std::vector<std::pair<int, int32_t>> work;
    for (int i = first; i < std::min(max_batch, first + per_step); ++i) work.push_back({i, context});
    const StepBatch b = runner.build(work);
    const auto s = std::chrono::steady_clock::now();
    runner.run(b);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count();
    if (first > 0) {
      prefill_total_ms += ms;
      prefill_tokens += b.num_tokens();
    }
  }
  Row prefill{label, "prefill", per_step, static_cast<double>(context), prefill_total_ms / std::max(1, max_batch / per_step - 1), 0,
              prefill_tokens / (prefill_total_ms * 1e-3), 0};
  std::printf("%s prefill: %.0f tokens/s (%d-token steps of %d prompts)\n", label.c_str(), prefill.tokens_per_s,
              per_step * context, per_step);
  rows.push_back(prefill);
  const double kv_bytes_per_token = static_cast<double>(c.n_layer) * 2 * c.n_head_kv * c.head_dim * 2;
  for (int batch : {1, 16, 64, 256}) {
    std::vector<double> wall, device;
    double ctx_sum = 0;
    for (int step = 0; step < steps + 3; ++step) {
      std::vector<std::pair<int, int32_t>> work;
      double ctx = 0;
      for (int i = 0; i < batch; ++i) {
        work.push_back({i, 1});
        ctx += runner.seq(i).computed + 1;
      }
      const StepBatch b = runner.build(work);
      const auto s = std::chrono::steady_clock::now();
      runner.run(b);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count();
      if (step >= 3) {
        wall.push_back(ms);
        device.push_back(backend.last_step_device_ms());
        ctx_sum += ctx;
      }
    }
    Row r;
    r.model = label;
    r.what = "decode";
    r.batch = batch;
    r.context = ctx_sum / steps / batch;
    r.wall_ms = median(wall);
    r.device_ms = median(device);
    r.tokens_per_s = batch / (r.wall_ms * 1e-3);
    r.bytes = static_cast<double>(backend.gemm_weight_bytes()) + ctx_sum / steps * kv_bytes_per_token +
              2.0 * batch * c.n_vocab * 4.0;
    std::printf("%s decode batch %d: %.3f ms/step wall, %.3f ms device, %.0f tokens/s, %.2f GB read, %.0f GB/s\n",
                label.c_str(), batch, r.wall_ms, r.device_ms, r.tokens_per_s, r.bytes / 1e9, r.bytes / (r.device_ms * 1e-3) / 1e9);
    std::fflush(stdout);
    rows.push_back(r);
  }
  return rows;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

model::TensorType type_named(const std::string& name) {
  for (auto t : {model::TensorType::kF32, model::TensorType::kF16, model::TensorType::kBF16, model::TensorType::kQ8_0,
                 model::TensorType::kQ4_0, model::TensorType::kQ4_1}) {
    if (model::tensor_type_name(t) == name) return t;
  }
  throw std::invalid_argument("unknown weight type " + name);
}

}  // namespace

int main(int argc, char** argv) {
  std::string models = "default,llama-3-8b";
  int context = 512, steps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--models") models = argv[i + 1];
    if (flag == "--context") context = std::atoi(argv[i + 1]);
    if (flag == "--steps") steps = std::atoi(argv[i + 1]);
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("cuda_decode_bench: no CUDA device; nothing measured\n");
    return 0;
  }
  try {
    const double copy_bw = copy_bandwidth();
    std::printf("device-to-device copy: %.0f GB/s (read + write)\n", copy_bw / 1e9);
    std::vector<Row> rows;
    for (const std::string& m : split(models)) {
      std::vector<Row> got;
      if (m == "real") {
        const char* env = std::getenv("TROUPE_TEST_MODEL");
        const std::filesystem::path path = env ? env : std::filesystem::path(TROUPE_SOURCE_DIR) / "models/SmolLM2-135M-Instruct.Q4_1.gguf";
        if (!std::filesystem::exists(path)) {
          std::printf("real: %s not found, skipped\n", path.c_str());
          continue;
        }
        auto file = std::make_shared<const model::GgufFile>(model::GgufFile::open(path));
        got = bench_model("SmolLM2-135M-Q4_1", model::LlamaWeights::from_gguf(file), context, steps);
      } else {
        model::DummyWeightsSpec spec;
        std::string shape = m, type = "BF16";
        if (m == "default") shape = "smollm2-135m", type = "Q4_1";
        if (const auto colon = m.find(':'); colon != std::string::npos) shape = m.substr(0, colon), type = m.substr(colon + 1);
        spec.shape = shape;
        spec.type = type_named(type);
        const auto t0 = std::chrono::steady_clock::now();
        model::LlamaWeights w = model::make_dummy_weights(spec);
        std::printf("%s %s: dummy weights made in %.1f s\n", shape.c_str(), type.c_str(),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        got = bench_model(shape + " " + type, std::move(w), context, steps);
      }
      rows.insert(rows.end(), got.begin(), got.end());
    }
    std::printf("\n| model | step | batch | mean ctx | wall ms | device ms | tokens/s | GB read | GB/s | %% of copy | %% of 4.3 TB/s |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Row& r : rows) {
      if (r.what == "prefill") {
        std::printf("| %s | prefill | %d prompts | %.0f | %.2f | | %.0f | | | | |\n", r.model.c_str(), r.batch, r.context,
                    r.wall_ms, r.tokens_per_s);
      } else {
        const double bw = r.bytes / (r.device_ms * 1e-3);
        std::printf("| %s | decode | %d | %.0f | %.3f | %.3f | %.0f | %.2f | %.0f | %.0f%% | %.0f%% |\n", r.model.c_str(),
                    r.batch, r.context, r.wall_ms, r.device_ms, r.tokens_per_s, r.bytes / 1e9, bw / 1e9,
                    100 * bw / copy_bw, 100 * bw / kNominalBandwidth);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_decode_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
