// CUDA against the CPU reference for every weight type the backend accepts, at the default
// model's shape (SmolLM2-135M: 30 layers, 576 wide, vocabulary 49,152), at Gemma 3 270M's (its
// graph: F16 and a Q4_K_M mix), and on the real default model when models/ has it. Three models
// per type:
//
//   GPU(T)          the CUDA backend on the type-T model
//   CPU(T)          the CPU backend on it (int8 activations for quantized types, as llama.cpp)
//   CPU(F16 of T)   the CPU backend on the same model decoded to the GPU's compute type
//                   (model/dequantized_weights.hpp): what the GPU computes, in float on the CPU
//
// GPU(T) must match CPU(F16 of T) to the device's own arithmetic noise (the bound the F16 rows
// of issue 34's table reached: <= 9e-4 at every depth), whatever T is: that isolates the
// device path from the quantized CPU kernels. GPU(T) against CPU(T) is then allowed what T's own
// quantized arithmetic costs, measured here as CPU(T) against CPU(F16 of T). Greedy tokens must
// agree except at near-ties. The op-by-op harness names the first intermediate (layer and op, in
// llama.cpp's names) where the device leaves the reference, so a failure says where to look.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/cuda/cuda_backend.hpp"
#include "model/dequantized_weights.hpp"
#include "model/dummy_weights.hpp"
#include "model/gguf.hpp"
#include "tests/gpu/cpu_step_harness.hpp"
#include "tests/gpu/cpu_test_util.hpp"
#include "tests/gpu/cuda_test_util.hpp"
#include "tests/gpu/parity_support.hpp"

namespace troupe::gpu::cuda {
namespace {

using gpu::testing::ParityTally;
using gpu::testing::random_tokens;
using gpu::testing::run_teacher_forced;
using model::TensorType;

constexpr int32_t kBlocks = 512;

// The device's own noise against float on the CPU, by compute type: F16 reached <= 9e-4 at
// every depth of the SmolLM2 shape on the H200 (issue 34), BF16 5e-3 - 6e-3 (8-bit mantissas).
double device_bound(ActType act) {
  return act == ActType::kF16 ? 3e-3 : 2e-2;
}

TensorType compute_type_of(const model::LlamaWeights& w) {
  return w.layers().front().wq.type == TensorType::kBF16 ? TensorType::kBF16 : TensorType::kF16;
}

std::unique_ptr<cpu::CpuBackend> cpu_backend(model::LlamaWeights w,
                                             cpu::ForwardObserver observer = {}) {
  cpu::CpuBackendConfig cfg;
  cfg.num_blocks = kBlocks;
  cfg.observer = std::move(observer);
  return std::make_unique<cpu::CpuBackend>(std::move(w), cfg);
}

std::unique_ptr<CudaBackend> gpu_backend(model::LlamaWeights w, ForwardObserver observer = {}) {
  CudaBackendConfig cfg;
  cfg.num_blocks = kBlocks;
  cfg.max_num_batched_tokens = 1024;
  cfg.max_num_seqs = 32;
  cfg.observer = std::move(observer);
  return std::make_unique<CudaBackend>(std::move(w), cfg);
}

struct TypeParity {
  ParityTally device;  // GPU(T) vs CPU(F16 of T)
  ParityTally noise;   // CPU(T) vs CPU(F16 of T)
  ParityTally total;   // GPU(T) vs CPU(T)
  double tolerance = 0.0;
};

// The three comparisons for one model, with the prompts every parity test uses.
TypeParity measure(const model::LlamaWeights& w, const std::vector<std::vector<int32_t>>& prompts,
                   int decode_steps, const std::string& label) {
  const TensorType act = compute_type_of(w);
  const model::LlamaWeights decoded = model::dequantized_copy(w, act);
  auto reference = cpu_backend(decoded);
  auto quantized = cpu_backend(w);
  auto gpu = gpu_backend(w);
  TypeParity p;
  p.device = run_teacher_forced(*reference, *gpu, prompts, 64, decode_steps, kBlocks);
  p.noise = run_teacher_forced(*reference, *quantized, prompts, 64, decode_steps, kBlocks);
  p.total = run_teacher_forced(*quantized, *gpu, prompts, 64, decode_steps, kBlocks);
  const double bound = device_bound(act == TensorType::kF16 ? ActType::kF16 : ActType::kBF16);
  p.tolerance = 1.5 * (bound + p.noise.worst_step_relative);
  // One line per model: bench/device_check.sh collects them into its per-type table.
  std::printf(
      "[ parity %s ] device %.3g (bound %.3g) | type noise %.3g | GPU vs CPU %.3g (tolerance %.3g) "
      "| "
      "greedy %d/%d exact, %d near-ties, %d mismatches\n",
      label.c_str(), p.device.worst_step_relative, bound, p.noise.worst_step_relative,
      p.total.worst_step_relative, p.tolerance, p.total.exact, p.total.rows, p.total.near_ties,
      p.total.mismatches);
  EXPECT_LT(p.device.worst_step_relative, bound)
      << label << ": the device leaves float arithmetic on the same weights";
  EXPECT_LT(p.total.worst_step_relative, p.tolerance) << label;
  EXPECT_EQ(p.device.mismatches, 0) << label << ": " << p.device.first_mismatch;
  EXPECT_EQ(p.total.mismatches, 0) << label << ": " << p.total.first_mismatch;
  return p;
}

std::vector<std::vector<int32_t>> dummy_prompts(int vocab) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) prompts.push_back(random_tokens(20 + 11 * i, 7 + i, vocab));
  return prompts;
}

struct ParityCase {
  TensorType type;
  model::DummyMix mix = model::DummyMix::kUniform;
  // The default model's (a llama), or Gemma 3 270M's: the Gemma graph (issue 36) at its real
  // shape, whose op-by-op table localizes a device error in one run.
  const char* shape = "smollm2-135m";
  std::string name() const {
    const std::string type_name = mix == model::DummyMix::kQ4_K_M
                                      ? "Q4_K_M_mix"
                                      : std::string(model::tensor_type_name(type));
    return std::string(shape) == "gemma3-270m" ? "gemma3_" + type_name : type_name;
  }
};

model::LlamaWeights default_shape(const ParityCase& k) {
  model::DummyWeightsSpec spec;
  spec.shape = k.shape;
  spec.type = k.type;
  spec.seed = 3;
  spec.mix = k.mix;
  return model::make_dummy_weights(spec);
}

std::vector<ParityCase> parity_cases() {
  std::vector<ParityCase> cases;
  for (const TensorType t :
       {TensorType::kF16, TensorType::kBF16, TensorType::kF32, TensorType::kQ4_0, TensorType::kQ4_1,
        TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kQ8_0, TensorType::kQ4_K,
        TensorType::kQ5_K, TensorType::kQ6_K}) {
    cases.push_back({t});
  }
  cases.push_back({TensorType::kQ4_K, model::DummyMix::kQ4_K_M});
  cases.push_back({TensorType::kF16, model::DummyMix::kUniform, "gemma3-270m"});
  cases.push_back({TensorType::kQ4_K, model::DummyMix::kQ4_K_M, "gemma3-270m"});
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<ParityCase>& info) {
  return info.param.name();
}

class CudaParity : public ::testing::TestWithParam<ParityCase> {};

TEST_P(CudaParity, LogitsAndGreedyAtTheDefaultModelsShape) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  measure(default_shape(GetParam()), dummy_prompts(49152), 8,
          GetParam().name() + " " + GetParam().shape);
}

// ----- op by op -----

using Recording = std::map<std::pair<int32_t, std::string>, std::vector<float>>;

// Records every observed intermediate of a step (rows x cols, packed).
ForwardObserver recorder(Recording& into, std::vector<std::pair<int32_t, std::string>>& order) {
  return [&into, &order](const char* name, int32_t layer, const float* data, int64_t rows,
                         int64_t cols, int64_t ld) {
    std::vector<float>& v = into[{layer, name}];
    if (v.empty()) order.push_back({layer, name});
    v.clear();
    for (int64_t r = 0; r < rows; ++r) v.insert(v.end(), data + r * ld, data + r * ld + cols);
  };
}

TEST_P(CudaParity, OpByOpTheDeviceFollowsTheReferenceThroughEveryLayer) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const model::LlamaWeights w = default_shape(GetParam());
  const TensorType act = compute_type_of(w);
  const double bound = 5 * device_bound(act == TensorType::kF16 ? ActType::kF16 : ActType::kBF16);
  Recording on_cpu, on_gpu;
  std::vector<std::pair<int32_t, std::string>> cpu_order, gpu_order;
  auto reference = cpu_backend(model::dequantized_copy(w, act), recorder(on_cpu, cpu_order));
  auto gpu = gpu_backend(w, recorder(on_gpu, gpu_order));
  const std::vector<int32_t> prompt = random_tokens(40, 21, 49152);
  cpu::testing::StepHarness hc(kBlocks, 16), hg(kBlocks, 16);
  hc.add(0, prompt);
  hg.add(0, prompt);
  reference->compute_logits(hc.build({{0, 40}}));
  gpu->compute_logits(hg.build({{0, 40}}));
  ASSERT_FALSE(gpu_order.empty()) << "the CUDA backend observed nothing";
  std::string first_divergence, table;
  double worst = 0.0;
  for (const auto& key : gpu_order) {
    const auto it = on_cpu.find(key);
    ASSERT_NE(it, on_cpu.end()) << "the CPU pass has no " << key.second << " at layer "
                                << key.first;
    const double e = gpu::testing::logits_relative_error(on_gpu[key], it->second);
    worst = cpu::testing::max_or_nan(worst, e);
    char line[128];
    std::snprintf(line, sizeof line, "  layer %3d %-12s %.3g\n", key.first, key.second.c_str(), e);
    table += line;
    if (!(e < bound) && first_divergence.empty()) {
      first_divergence = "layer " + std::to_string(key.first) + " " + key.second;
    }
  }
  std::printf("[ op by op %s ] %zu intermediates, worst relative error %.3g (bound %.3g)%s%s\n",
              GetParam().name().c_str(), gpu_order.size(), worst, bound,
              first_divergence.empty() ? "" : ", first divergence: ", first_divergence.c_str());
  EXPECT_TRUE(first_divergence.empty()) << "the device first leaves the reference at "
                                        << first_divergence << " (relative error per op below)\n"
                                        << table;
}

INSTANTIATE_TEST_SUITE_P(Types, CudaParity, ::testing::ValuesIn(parity_cases()), case_name);

// The real default model (Q4_1 layers, Q8_0 token_embd, tied output): the same three-way parity
// on a fixed chat prompt (tests/reference/smollm2_greedy.json's first) and two random ones.
TEST(CudaParityOnRealModel, SmolLM2DefaultModel) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const std::filesystem::path path = cpu::testing::default_model_path();
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << "model not found: " << path << " (set TROUPE_TEST_MODEL)";
  const auto file = std::make_shared<const model::GgufFile>(model::GgufFile::open(path));
  std::vector<std::vector<int32_t>> prompts = {{1,     9690,  198,  2683, 359,   253, 5356, 5646,
                                                11173, 3365,  3511, 308,  34519, 28,  7018, 411,
                                                407,   19712, 8182, 2,    198,   1,   4093, 198}};
  for (int i = 0; i < 2; ++i) prompts.push_back(random_tokens(30 + 17 * i, 40 + i, 49152));
  measure(model::LlamaWeights::from_gguf(file), prompts, 16, "SmolLM2-135M-Instruct Q4_1");
}

}  // namespace
}  // namespace troupe::gpu::cuda
