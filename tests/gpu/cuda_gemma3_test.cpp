// The CUDA ops Gemma 3 adds, each against its CPU twin, and the CUDA backend on a Gemma-3-shaped
// model against the CPU backend (issue 36): per-head Q/K RMSNorm, the post norms' norm-and-add,
// the embedding scale, RoPE's query scale before the fp16 rounding, paged attention with head_dim
// 256 and a sliding window whose freed pages (-1 in the block table) are never read, and the
// whole forward pass with its KV groups. Skips without a CUDA device (bench/device_check.sh runs
// it on the device machine).
//
// Tolerances: the norms and the embedding scale are the CPU's arithmetic in the same order (the
// double sums of a norm may round differently in their last bit: relative 1e-6); RoPE and
// attention as in cuda_ops_test.cpp; the backends as in cuda_backend_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/cpu/matmul.hpp"
#include "gpu/cpu/rmsnorm.hpp"
#include "gpu/cpu/rope.hpp"
#include "gpu/cuda/cuda_backend.hpp"
#include "gpu/cuda/embedding.cuh"
#include "gpu/cuda/head_rmsnorm.cuh"
#include "gpu/cuda/rmsnorm.cuh"
#include "gpu/cuda/rope.cuh"
#include "model/dummy_weights.hpp"
#include "model/fp16.hpp"
#include "model/llama_config.hpp"
#include "tests/gpu/cpu_test_util.hpp"
#include "tests/gpu/cuda_attention_util.hpp"
#include "tests/gpu/cuda_test_util.hpp"
#include "tests/gpu/parity_support.hpp"

namespace troupe::gpu::cuda {
namespace {

using cuda::testing::AttentionShape;
using cuda::testing::DeviceArray;
using cpu::testing::random_floats;
using cuda::testing::relative_error;
using gpu::testing::ParityTally;
using gpu::testing::random_tokens;
using gpu::testing::run_teacher_forced;
using model::TensorType;

// Gemma 3 270M's heads (4 query heads on one KV head of 256) and a llama-like GQA shape.
struct HeadShape {
  int32_t n_head, n_head_kv, head_dim;
};
const HeadShape kHeadShapes[] = {{4, 1, 256}, {8, 2, 64}};

TEST(CudaGemma3Ops, HeadRmsNormNormsEachQAndKHeadLikeTheCpuTwin) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  for (const HeadShape s : kHeadShapes) {
    const int32_t T = 6;
    const int64_t Q = s.n_head * s.head_dim, KV = s.n_head_kv * s.head_dim, W = Q + 2 * KV;
    const std::vector<float> qkv = random_floats(T * W, s.head_dim, 3.0f);
    const std::vector<float> q_w = random_floats(s.head_dim, 1), k_w = random_floats(s.head_dim, 2);
    DeviceArray<float> d_qkv(qkv), d_qw(q_w), d_kw(k_w);
    head_rmsnorm_inplace(HeadRmsNormArgs{.qkv = d_qkv.get(),
                                         .ld = W,
                                         .num_tokens = T,
                                         .n_head = s.n_head,
                                         .n_head_kv = s.n_head_kv,
                                         .head_dim = s.head_dim,
                                         .q_weight = d_qw.get(),
                                         .k_weight = d_kw.get(),
                                         .eps = 1e-6f},
                         nullptr);
    const std::vector<float> got = d_qkv.download();
    std::vector<float> want = qkv;  // the CPU twin: LlamaForward::prepare_qkv_row's loops
    for (int32_t t = 0; t < T; ++t) {
      for (int32_t h = 0; h < s.n_head + s.n_head_kv; ++h) {
        float* x = &want[t * W + static_cast<int64_t>(h) * s.head_dim];
        const float* w = h < s.n_head ? q_w.data() : k_w.data();
        cpu::rmsnorm(x, w, x, s.head_dim, 1e-6f, cpu::IsaLevel::kScalar);
      }
      for (int64_t j = Q + KV; j < W; ++j) {
        ASSERT_EQ(got[t * W + j], qkv[t * W + j]) << "V column " << j << " was touched";
      }
    }
    EXPECT_LT(relative_error(got, want), 1e-6) << "head_dim " << s.head_dim;
  }
}

// gemma3's post norms: the projection's rows normed, then added to the residual stream.
TEST(CudaGemma3Ops, RmsNormAddsItsRowsToTheResidualLikeThePostNorm) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const int32_t n = 640, rows = 7;
  const std::vector<float> t = random_floats(static_cast<size_t>(rows) * n, 31, 5.0f);
  const std::vector<float> residual = random_floats(static_cast<size_t>(rows) * n, 32, 20.0f);
  const std::vector<float> w = random_floats(n, 33);
  DeviceArray<float> d_t(t), d_w(w), d_x(residual);
  RmsNormArgs a;
  a.x = d_t.get();
  a.ld_x = n;
  a.num_rows = rows;
  a.weight = d_w.get();
  a.n = n;
  a.eps = 1e-6f;
  a.out_f32 = d_x.get();
  a.add_to_out = true;
  a.ld_out = n;
  rmsnorm_rows(a, nullptr);
  std::vector<float> want = residual, normed(n);
  for (int32_t r = 0; r < rows; ++r) {
    cpu::rmsnorm(&t[r * n], w.data(), normed.data(), n, 1e-6f, cpu::IsaLevel::kScalar);
    for (int32_t j = 0; j < n; ++j) want[r * n + j] += normed[j];
  }
  EXPECT_LT(relative_error(d_x.download(), want), 1e-6);
}

TEST(CudaGemma3Ops, EmbeddingGatherScalesTheRowsInF32) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const int64_t vocab = 50, n_embd = 640;
  const float scale = std::sqrt(static_cast<float>(n_embd));  // gemma3's embedding_scale
  for (const TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kQ8_0}) {
    const std::vector<uint8_t> raw = cpu::testing::random_weights(type, vocab, n_embd, 9);
    const std::vector<int32_t> ids = {0, 49, 7, 7, 23};
    DeviceArray<uint8_t> d_raw(raw);
    DeviceArray<int32_t> d_ids(ids);
    DeviceArray<float> out(ids.size() * n_embd);
    const int64_t row_bytes = static_cast<int64_t>(model::row_bytes(type, n_embd));
    embedding_gather(d_raw.get(), static_cast<WeightType>(type), row_bytes,
                     static_cast<int32_t>(n_embd), d_ids.get(), static_cast<int32_t>(ids.size()),
                     out.get(), nullptr, scale);
    const std::vector<float> got = out.download();
    std::vector<float> want(ids.size() * n_embd);
    for (size_t t = 0; t < ids.size(); ++t) {
      float* row = &want[t * n_embd];
      cpu::dequantize_row(type, raw.data() + ids[t] * row_bytes, n_embd, row);
      for (int64_t j = 0; j < n_embd; ++j) row[j] *= scale;  // LlamaForward's embedding step
    }
    EXPECT_LT(relative_error(got, want), 1e-6) << model::tensor_type_name(type);
  }
}

// The scale lands between the rotation and the fp16 rounding, as on the CPU: scaled after the
// rounding, the queries would not be fp16 values.
TEST(CudaGemma3Ops, RopeScalesTheQueriesBeforeTheirFp16Rounding) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const HeadShape s{4, 1, 256};
  const float q_scale = 1.0f / std::sqrt(128.0f);  // not a power of two: the order shows
  for (const float base : {10000.0f, 1000000.0f}) {  // gemma3's sliding and global bases
    const int32_t T = 5;
    const int64_t Q = s.n_head * s.head_dim, KV = s.n_head_kv * s.head_dim, W = Q + 2 * KV;
    const std::vector<int32_t> positions = {0, 1, 511, 512, 3000};
    std::vector<float> qkv = random_floats(T * W, 77);
    DeviceArray<float> d_qkv(qkv);
    DeviceArray<int32_t> d_pos(positions);
    rope_inplace(RopeArgs{.qkv = d_qkv.get(), .ld = W, .positions = d_pos.get(), .num_tokens = T,
                          .n_head = s.n_head, .n_head_kv = s.n_head_kv, .head_dim = s.head_dim,
                          .n_rot = s.head_dim, .freq_base = base, .freq_scale = 1.0f,
                          .freq_factors = nullptr, .neox = true, .q_scale = q_scale,
                          .round_q_to_f16 = true},
                 nullptr);
    const std::vector<float> got = d_qkv.download();
    const cpu::RopeParams p{s.head_dim, base, 1.0f, nullptr};
    std::vector<float> cs(s.head_dim / 2), sn(s.head_dim / 2);
    for (int32_t t = 0; t < T; ++t) {
      float* row = &qkv[t * W];
      cpu::rope_table(positions[t], p, cs.data(), sn.data());
      cpu::rope_apply_neox(row, s.n_head + s.n_head_kv, s.head_dim, s.head_dim, cs.data(),
                           sn.data());
      for (int64_t j = 0; j < Q; ++j) row[j] *= q_scale;
      for (int64_t j = 0; j < Q + KV; ++j) {
        const float g = got[t * W + j];
        const double tol = (j < Q ? 1e-3 : 1e-4) * (1 + std::fabs(row[j]));
        ASSERT_NEAR(g, row[j], tol) << "token " << t << " column " << j << " base " << base;
        if (j < Q) {
          ASSERT_EQ(g, model::fp16_to_fp32(model::fp32_to_fp16(g)))
              << "query not fp16-valued: scaled after its rounding?";
        }
      }
    }
  }
}

// A mixed batch whose sequences reach far past the window; the block-table entries wholly below
// each sequence's first visible key are -1, as the scheduler leaves a sliding group's freed
// pages: read, they would fault or bring garbage.
TEST(CudaGemma3Ops, PagedAttentionKeepsToTheSlidingWindowAndHeadDim256) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  for (const AttentionShape s : {AttentionShape{4, 1, 256}, AttentionShape{9, 3, 64}}) {
    for (const int32_t window : {0, 40}) {
      const int32_t bs = 16, num_blocks = 160;
      cuda::testing::PagedBatch batch = cuda::testing::make_paged_batch(
          {{1, 1}, {40, 40}, {300, 1}, {1000, 37}, {17, 1}}, bs, num_blocks,
          static_cast<uint32_t>(s.head_dim + window));
      if (window > 0) {
        for (int32_t t = 0; t < batch.num_tokens(); ++t) {
          // The row's first token is its smallest position: its window bounds the whole span.
          if (t > 0 && batch.table_rows[t] == batch.table_rows[t - 1]) continue;
          const int32_t first_key = std::max(0, batch.positions[t] + 1 - window);
          for (int32_t b = 0; b < first_key / bs; ++b) {
            batch.tables[batch.table_rows[t] * batch.max_blocks + b] = -1;
          }
        }
      }
      const size_t cache = static_cast<size_t>(num_blocks) * s.n_head_kv * bs * s.head_dim;
      auto [k, v] = cuda::testing::random_fp16_cache(cache, 51, 52);
      const std::vector<float> q =
          cuda::testing::random_fp16_queries(batch.num_tokens() * s.n_head * s.head_dim, 53);
      DeviceArray<uint16_t> dk(k), dv(v);
      const float scale = 1.0f / 16.0f;
      const std::vector<float> got = cuda::testing::device_attention(
          batch, q, dk.get(), dv.get(), s, bs, scale, KvElement::kF16, 1.0f, 1.0f, window);
      const std::vector<float> want = cuda::testing::reference_attention(
          cuda::testing::fp16_view(k, v, num_blocks, bs, s), batch, q, s, scale, window);
      EXPECT_LT(relative_error(got, want), 1e-4)
          << "heads " << s.n_head << "/" << s.n_head_kv << " dim " << s.head_dim << " window "
          << window;
    }
  }
}

// ----- the backend -----

// Gemma 3 270M's graph (18 layers, 640 wide, heads of 256, five sliding layers to a global one)
// with a 32-token window and an 8k vocabulary, so short prompts cross the window and free pages.
model::LlamaConfig small_window_gemma3() {
  model::LlamaConfig c = *model::LlamaConfig::named_shape("gemma3-270m");
  c.sliding_window = 32;
  c.n_vocab = 8192;
  return c;
}

std::unique_ptr<cpu::CpuBackend> cpu_backend(model::LlamaWeights w) {
  cpu::CpuBackendConfig cfg;
  cfg.num_blocks = 256;
  return std::make_unique<cpu::CpuBackend>(std::move(w), cfg);
}

CudaBackendConfig gpu_config() {
  CudaBackendConfig cfg;
  cfg.num_blocks = 256;
  cfg.max_num_batched_tokens = 1024;
  cfg.max_num_seqs = 32;
  return cfg;
}

TEST(CudaGemma3Backend, HasTheCpuBackendsKvGroups) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const model::LlamaConfig c = small_window_gemma3();
  CudaBackend gpu_b(model::make_dummy_weights(c, TensorType::kF16, 5), gpu_config());
  const KvCacheGeometry g = gpu_b.kv_geometry();
  const KvCacheGeometry want =
      cpu_backend(model::make_dummy_weights(c, TensorType::kF16, 5))->kv_geometry();
  EXPECT_EQ(g.num_kv_groups, 6);  // layers 5, 11, 17; then five groups of three sliding layers
  EXPECT_EQ(g.num_kv_groups, want.num_kv_groups);
  EXPECT_EQ(g.sliding_window, want.sliding_window);
  EXPECT_EQ(g.layers_per_group, want.layers_per_group);
  EXPECT_EQ(g.num_blocks, 256);
}

// Teacher-forced from the CPU backend: prefill in chunks past the window, then decode steps; every
// step's logits close, greedy equal except at near-ties.
TEST(CudaGemma3Backend, SmallWindowModelFollowsTheCpuBackend) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const model::LlamaConfig c = small_window_gemma3();
  for (const TensorType type : {TensorType::kF16, TensorType::kQ8_0}) {
    auto cpu_b = cpu_backend(model::make_dummy_weights(c, type, 5));
    CudaBackend gpu_b(model::make_dummy_weights(c, type, 5), gpu_config());
    const std::vector<std::vector<int32_t>> prompts = {
        random_tokens(3, 1, c.n_vocab), random_tokens(70, 2, c.n_vocab),
        random_tokens(150, 3, c.n_vocab)};
    for (const int chunk : {1, 64}) {
      const ParityTally t = run_teacher_forced(*cpu_b, gpu_b, prompts, chunk, 6, 256);
      std::printf("[ gemma3 %s chunk %d ] %d rows, %d exact, %d near-ties, worst step %.4g\n",
                  std::string(model::tensor_type_name(type)).c_str(), chunk, t.rows, t.exact,
                  t.near_ties, t.worst_step_relative);
      EXPECT_LT(t.worst_step_relative, 3e-2) << model::tensor_type_name(type) << " chunk " << chunk;
      EXPECT_EQ(t.mismatches, 0) << t.first_mismatch;
    }
  }
}

}  // namespace
}  // namespace troupe::gpu::cuda
