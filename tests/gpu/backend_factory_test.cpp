// Which backend a model gets (gpu/backend_factory.hpp's decide_backend) and the proven-type list
// behind it (gpu/cuda_proven_types.hpp): no silent garbage on a GPU. Pure decisions: no device
// needed, so these run in every build.
#include "gpu/backend_factory.hpp"

#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "gpu/cuda_proven_types.hpp"
#include "model/dummy_weights.hpp"
#include "model/gguf.hpp"
#include "tests/gpu/cpu_test_util.hpp"

namespace troupe::gpu {
namespace {

using model::TensorType;

const std::vector<std::string> kH200 = {"NVIDIA H200"};

model::LlamaWeights tiny(TensorType type) {
  return model::make_dummy_weights(cpu::testing::tiny_config(), type, 1);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CudaProvenTypes, EveryProofSaysWhenWhereAndWhat) {
  ASSERT_FALSE(cuda_proven_weight_types().empty());
  for (const CudaTypeProof& p : cuda_proven_weight_types()) {
    EXPECT_EQ(std::string(p.date).size(), 10u) << p.date;
    EXPECT_FALSE(std::string(p.device).empty());
    EXPECT_FALSE(std::string(p.evidence).empty());
    EXPECT_TRUE(cuda_proof_of(p.type).has_value());
  }
}

// The default model's types answered garbage on an H200 (issue 34): unproven until a GPU run
// shows otherwise, so they must not be on the list by accident.
TEST(CudaProvenTypes, TheTypesThatFailedOnTheH200AreNotProven) {
  for (const TensorType t : {TensorType::kQ4_1, TensorType::kQ8_0, TensorType::kQ4_K,
                             TensorType::kQ6_K, TensorType::kQ5_0}) {
    EXPECT_FALSE(cuda_proof_of(t).has_value()) << model::tensor_type_name(t);
  }
}

TEST(CudaProvenTypes, FirstUnprovenTensorIsNamedInFileOrder) {
  EXPECT_FALSE(first_unproven_cuda_tensor(tiny(TensorType::kF16)).has_value());
  const auto q41 = first_unproven_cuda_tensor(tiny(TensorType::kQ4_1));
  ASSERT_TRUE(q41.has_value());
  EXPECT_EQ(q41->name, "token_embd.weight");
  EXPECT_EQ(q41->type, TensorType::kQ4_1);
  // A Q4_K_M mix's first unproven matrix, whatever its type, is named with that type.
  model::LlamaConfig c = cpu::testing::tiny_config();
  c.n_embd = 256;
  c.n_head = 8;
  c.n_ff = 512;
  const auto mix = first_unproven_cuda_tensor(
      model::make_dummy_weights(c, TensorType::kQ4_K, 1, model::DummyMix::kQ4_K_M));
  ASSERT_TRUE(mix.has_value());
  EXPECT_EQ(mix->name, "token_embd.weight");
  EXPECT_EQ(mix->type, TensorType::kQ6_K);  // tied output: token_embd takes Q6_K
}

TEST(BackendDecision, CudaRefusesAnUnprovenModelNamingTensorTypeAndTheWayOut) {
  const BackendDecision d =
      decide_backend(BackendRequest::kCuda, true, kH200, "", tiny(TensorType::kQ4_1), false);
  EXPECT_EQ(d.verdict, BackendVerdict::kRefuse);
  EXPECT_TRUE(contains(d.note, "token_embd.weight")) << d.note;
  EXPECT_TRUE(contains(d.note, "Q4_1")) << d.note;
  EXPECT_TRUE(contains(d.note, "--backend cpu")) << d.note;
  EXPECT_TRUE(contains(d.note, "proven: F16")) << d.note;
}

TEST(BackendDecision, CudaRunsAnUnprovenModelOnlyWhenTheEnvironmentAllowsIt) {
  const BackendDecision d =
      decide_backend(BackendRequest::kCuda, true, kH200, "", tiny(TensorType::kQ8_0), true);
  EXPECT_EQ(d.verdict, BackendVerdict::kCuda);
  EXPECT_TRUE(contains(d.note, "UNPROVEN")) << d.note;
  // `auto` never takes the override: it is for proving types, not for serving them.
  EXPECT_EQ(
      decide_backend(BackendRequest::kAuto, true, kH200, "", tiny(TensorType::kQ8_0), true).verdict,
      BackendVerdict::kCpu);
}

TEST(BackendDecision, AutoTakesCudaOnlyForAProvenModel) {
  const BackendDecision proven =
      decide_backend(BackendRequest::kAuto, true, kH200, "", tiny(TensorType::kF16), false);
  EXPECT_EQ(proven.verdict, BackendVerdict::kCuda);
  EXPECT_TRUE(contains(proven.note, "NVIDIA H200")) << proven.note;
  const BackendDecision unproven =
      decide_backend(BackendRequest::kAuto, true, kH200, "", tiny(TensorType::kQ4_0), false);
  EXPECT_EQ(unproven.verdict, BackendVerdict::kCpu);
  EXPECT_TRUE(contains(unproven.note, "Q4_0")) << unproven.note;
  EXPECT_TRUE(contains(unproven.note, "using the CPU backend")) << unproven.note;
}

// q8_0 KV is the CPU kernels' format: `auto` takes the CPU, `cuda` is refused by the setting.
TEST(BackendDecision, AQ8KvCacheIsTheCpuBackends) {
  const auto w = tiny(TensorType::kF16);
  const BackendDecision cuda =
      decide_backend(BackendRequest::kCuda, true, kH200, "", w, false, KvDtype::kQ8_0);
  EXPECT_EQ(cuda.verdict, BackendVerdict::kRefuse);
  EXPECT_NE(cuda.note.find("cache.kv_dtype \"q8_0\""), std::string::npos) << cuda.note;
  const BackendDecision automatic =
      decide_backend(BackendRequest::kAuto, true, kH200, "", w, false, KvDtype::kQ8_0);
  EXPECT_EQ(automatic.verdict, BackendVerdict::kCpu);
  EXPECT_NE(automatic.note.find("q8_0"), std::string::npos) << automatic.note;
  EXPECT_EQ(decide_backend(BackendRequest::kAuto, true, kH200, "", w, false, KvDtype::kF16).verdict,
            BackendVerdict::kCuda);
}

// fp8_e4m3 is the CUDA kernels' format, unproven until a GPU run adds its proof: `cuda` runs it
// only with the override, and wherever the CPU backend would get it, it is refused by name (the
// CPU backend has no FP8 cache) with the reason the CUDA one was not taken.
TEST(BackendDecision, AnFp8KvCacheNeedsTheCudaBackendAndItsProof) {
  const auto w = tiny(TensorType::kF16);
  ASSERT_FALSE(cuda_kv_proof_of(KvDtype::kFp8E4M3)) << "update this test with the proof";
  const BackendDecision refused =
      decide_backend(BackendRequest::kCuda, true, kH200, "", w, false, KvDtype::kFp8E4M3);
  EXPECT_EQ(refused.verdict, BackendVerdict::kRefuse);
  EXPECT_TRUE(contains(refused.note, "fp8_e4m3")) << refused.note;
  EXPECT_TRUE(contains(refused.note, "TROUPE_CUDA_UNPROVEN_TYPES=allow")) << refused.note;
  const BackendDecision allowed =
      decide_backend(BackendRequest::kCuda, true, kH200, "", w, true, KvDtype::kFp8E4M3);
  EXPECT_EQ(allowed.verdict, BackendVerdict::kCuda);
  EXPECT_TRUE(contains(allowed.note, "UNPROVEN")) << allowed.note;
  for (const BackendDecision& d :
       {decide_backend(BackendRequest::kAuto, true, kH200, "", w, false, KvDtype::kFp8E4M3),
        decide_backend(BackendRequest::kCpu, true, kH200, "", w, false, KvDtype::kFp8E4M3),
        decide_backend(BackendRequest::kAuto, true, {}, "no driver", w, false, KvDtype::kFp8E4M3)}) {
    EXPECT_EQ(d.verdict, BackendVerdict::kRefuse) << d.note;
    EXPECT_TRUE(contains(d.note, "cache.kv_dtype \"fp8_e4m3\" needs the CUDA backend")) << d.note;
  }
}

// gemma3's graph is unproven until a GPU run adds its row: an F16 gemma3, every weight type of
// it proven, stays off the device, named by its architecture, unless the override allows it.
TEST(BackendDecision, Gemma3NeedsItsGraphsOwnProofOnCuda) {
  model::LlamaConfig c = *model::LlamaConfig::named_shape("gemma3-270m");
  c.n_layer = 6;
  c.sliding_layers.resize(6);  // five sliding layers, then a global one, as in the file
  c.n_vocab = 512;
  const auto w = model::make_dummy_weights(c, TensorType::kF16, 1);
  ASSERT_STREQ(cuda_graph_of(c), "gemma3");
  ASSERT_FALSE(cuda_graph_proof_of(c)) << "update this test with the proof";
  ASSERT_TRUE(cuda_graph_proof_of(cpu::testing::tiny_config()));
  const BackendDecision automatic =
      decide_backend(BackendRequest::kAuto, true, kH200, "", w, false, KvDtype::kF16);
  EXPECT_EQ(automatic.verdict, BackendVerdict::kCpu);
  EXPECT_TRUE(contains(automatic.note, "gemma3")) << automatic.note;
  const BackendDecision refused =
      decide_backend(BackendRequest::kCuda, true, kH200, "", w, false, KvDtype::kF16);
  EXPECT_EQ(refused.verdict, BackendVerdict::kRefuse);
  EXPECT_TRUE(contains(refused.note, "architecture gemma3")) << refused.note;
  EXPECT_TRUE(contains(refused.note, "TROUPE_CUDA_UNPROVEN_TYPES=allow")) << refused.note;
  EXPECT_EQ(decide_backend(BackendRequest::kCuda, true, kH200, "", w, true, KvDtype::kF16).verdict,
            BackendVerdict::kCuda);
}

TEST(BackendDecision, NoDeviceOrNoCudaBuildMeansTheCpuBackend) {
  const auto w = tiny(TensorType::kF16);
  const BackendDecision none =
      decide_backend(BackendRequest::kCuda, true, {}, "driver missing", w, false);
  EXPECT_EQ(none.verdict, BackendVerdict::kCpu);
  EXPECT_TRUE(contains(none.note, "driver missing")) << none.note;
  EXPECT_EQ(decide_backend(BackendRequest::kAuto, false, kH200, "", w, false).verdict,
            BackendVerdict::kCpu);
  EXPECT_EQ(decide_backend(BackendRequest::kCpu, true, kH200, "", w, false).verdict,
            BackendVerdict::kCpu);
}

TEST(BackendDecision, TheDefaultModelIsRefusedOnCudaAndServedOnTheCpuByAuto) {
  const std::filesystem::path path = cpu::testing::default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found: " << path;
  const auto file = std::make_shared<const model::GgufFile>(model::GgufFile::open(path));
  const auto w = model::LlamaWeights::from_gguf(file);
  const BackendDecision cuda = decide_backend(BackendRequest::kCuda, true, kH200, "", w, false);
  EXPECT_EQ(cuda.verdict, BackendVerdict::kRefuse);
  EXPECT_TRUE(contains(cuda.note, "token_embd.weight has type Q8_0")) << cuda.note;
  EXPECT_EQ(decide_backend(BackendRequest::kAuto, true, kH200, "", w, false).verdict,
            BackendVerdict::kCpu);
}

}  // namespace
}  // namespace troupe::gpu
