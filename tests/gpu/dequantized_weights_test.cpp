// model::dequantized_copy (the same model with every matrix decoded to F16/BF16/F32), and what
// it is for: the CPU backend's logits on a quantized model against its F16 copy measure how far
// that type's own quantized arithmetic (int8 activations, as llama.cpp) moves the logits — the
// noise the CUDA parity tests derive each type's tolerance from (tests/gpu/cuda_parity_test.cpp).
#include "model/dequantized_weights.hpp"

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/cpu/cpu_backend.hpp"
#include "model/dummy_weights.hpp"
#include "model/fp16.hpp"
#include "model/quants/dequantize.hpp"
#include "tests/gpu/cpu_test_util.hpp"
#include "tests/gpu/parity_support.hpp"

namespace troupe::model {
namespace {

using gpu::testing::random_tokens;

std::vector<const WeightView*> matrices(const LlamaWeights& w) {
  std::vector<const WeightView*> out = {&w.token_embd()};
  for (const LlamaLayerWeights& l : w.layers()) {
    for (const WeightView* v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      out.push_back(v);
  }
  if (!w.config().tied_output) out.push_back(&w.output());
  return out;
}

TEST(DequantizedCopy, EveryMatrixIsTheReferenceDecodingRoundedToTheTarget) {
  for (const TensorType type : {TensorType::kQ4_1, TensorType::kQ8_0, TensorType::kQ6_K}) {
    LlamaConfig c = gpu::cpu::testing::tiny_config();
    c.n_embd = 256;  // whole K-quant super-blocks
    c.n_head = 8;
    const LlamaWeights w = make_dummy_weights(c, type, 3);
    for (const TensorType target : {TensorType::kF16, TensorType::kBF16, TensorType::kF32}) {
      const LlamaWeights d = dequantized_copy(w, target);
      const auto from = matrices(w), to = matrices(d);
      ASSERT_EQ(from.size(), to.size());
      for (size_t m = 0; m < from.size(); ++m) {
        ASSERT_EQ(to[m]->type, target);
        ASSERT_EQ(to[m]->name, from[m]->name);
        std::vector<float> row(static_cast<size_t>(from[m]->num_inputs));
        for (int64_t r = 0; r < from[m]->num_outputs; r += 7) {
          quants::dequantize_row(from[m]->type, from[m]->row(r), from[m]->num_inputs, row.data());
          for (int64_t j = 0; j < from[m]->num_inputs; ++j) {
            float want = row[j], got = 0.0f;
            if (target == TensorType::kF32) {
              std::memcpy(&got, to[m]->row(r) + 4 * j, 4);
            } else {
              const uint16_t bits = load_u16(to[m]->row(r) + 2 * j);
              got = target == TensorType::kF16 ? fp16_to_fp32(bits) : bf16_to_fp32(bits);
              want = target == TensorType::kF16 ? fp16_to_fp32(fp32_to_fp16(want))
                                                : bf16_to_fp32(fp32_to_bf16(want));
            }
            ASSERT_EQ(got, want) << from[m]->name << " row " << r << " col " << j << " as "
                                 << tensor_type_name(target);
          }
        }
      }
    }
  }
}

TEST(DequantizedCopy, KeepsTheModelsShapeTyingNormsAndRopeFactors) {
  LlamaConfig c = gpu::cpu::testing::tiny_config();
  const LlamaWeights tied = make_dummy_weights(c, TensorType::kQ8_0, 1);
  const LlamaWeights tied_copy = dequantized_copy(tied, TensorType::kF16);
  EXPECT_TRUE(tied_copy.config().tied_output);
  EXPECT_EQ(tied_copy.output().data, tied_copy.token_embd().data);
  EXPECT_EQ(tied_copy.output_norm().data, tied.output_norm().data);
  EXPECT_EQ(tied_copy.layers()[1].ffn_norm.data, tied.layers()[1].ffn_norm.data);

  c.tied_output = false;
  c.rope_freq_base = 500000.0f;
  c.rope_llama3 = Llama3RopeScaling{32.0f, 1.0f, 4.0f, 8192};
  const LlamaWeights untied = make_dummy_weights(c, TensorType::kQ4_0, 1);
  const LlamaWeights untied_copy = dequantized_copy(untied, TensorType::kBF16);
  EXPECT_FALSE(untied_copy.config().tied_output);
  EXPECT_EQ(untied_copy.output().type, TensorType::kBF16);
  EXPECT_NE(untied_copy.output().data, untied_copy.token_embd().data);
  ASSERT_EQ(untied_copy.rope_freq_factors().size(), untied.rope_freq_factors().size());
  EXPECT_EQ(untied_copy.rope_freq_factors().data(), untied.rope_freq_factors().data());
  EXPECT_THROW(dequantized_copy(untied, TensorType::kQ8_0), std::invalid_argument);
}

// An F16 model's F16 copy is the model, bit for bit: the CPU backend computes the same logits.
TEST(DequantizedCopy, AnF16ModelsCopyComputesTheSameLogits) {
  const LlamaWeights w = make_dummy_weights(gpu::cpu::testing::tiny_config(), TensorType::kF16, 4);
  gpu::cpu::CpuBackendConfig cfg;
  cfg.num_blocks = 64;
  gpu::cpu::CpuBackend a(w, cfg), b(dequantized_copy(w, TensorType::kF16), cfg);
  const gpu::testing::ParityTally t =
      gpu::testing::run_teacher_forced(a, b, {random_tokens(37, 5, 512)}, 16, 4, 64);
  EXPECT_EQ(t.worst_step_relative, 0.0);
  EXPECT_EQ(t.exact, t.rows);
}

// The noise of each type's quantized CPU arithmetic against its own F16 copy, on the tiny shape:
// small (the copy is the same model) but not zero (int8 activations), and greedy agrees except at
// near-ties. A copy that decoded anything wrong would sit at ~1.
class TypeNoise : public ::testing::TestWithParam<TensorType> {};

TEST_P(TypeNoise, CpuLogitsOfAQuantizedModelStayNearItsF16Copy) {
  const TensorType type = GetParam();
  const LlamaWeights w = make_dummy_weights(gpu::cpu::testing::tiny_config(), type, 5);
  gpu::cpu::CpuBackendConfig cfg;
  cfg.num_blocks = 256;
  gpu::cpu::CpuBackend quantized(w, cfg), f16(dequantized_copy(w, TensorType::kF16), cfg);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) prompts.push_back(random_tokens(9 + 23 * i, 100 + i, 512));
  const gpu::testing::ParityTally t =
      gpu::testing::run_teacher_forced(f16, quantized, prompts, 64, 6, 256);
  std::printf(
      "[ noise %s ] CPU(type) vs CPU(F16 copy): worst step relative %.3g, %d rows, %d exact, %d "
      "near-ties\n",
      std::string(tensor_type_name(type)).c_str(), t.worst_step_relative, t.rows, t.exact,
      t.near_ties);
  EXPECT_LT(t.worst_step_relative, 5e-2);
  EXPECT_EQ(t.mismatches, 0) << t.first_mismatch;
  if (type == TensorType::kF16) {
    EXPECT_EQ(t.worst_step_relative, 0.0);
  } else if (type != TensorType::kF32 && type != TensorType::kBF16) {
    EXPECT_GT(t.worst_step_relative, 0.0) << "int8 activations should leave some noise";
  }
}

INSTANTIATE_TEST_SUITE_P(Types, TypeNoise,
                         ::testing::Values(TensorType::kF32, TensorType::kF16, TensorType::kBF16,
                                           TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ5_0,
                                           TensorType::kQ5_1, TensorType::kQ8_0, TensorType::kQ4_K,
                                           TensorType::kQ5_K, TensorType::kQ6_K),
                         [](const auto& info) {
                           return std::string(tensor_type_name(info.param));
                         });

}  // namespace
}  // namespace troupe::model
