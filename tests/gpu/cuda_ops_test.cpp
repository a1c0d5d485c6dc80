// Each CUDA op against the CPU implementation (or a float64 reference) on random inputs of
// several shapes, outputs poisoned with NaN before each run. Skips without a CUDA device.
//
// Tolerances: dequantize/embedding within 1 ulp of the target type (the GPU contracts Q4_1's
// d*q + m into an fma, the CPU does not; the Q5 and K-quant decoders use explicit rounding and
// should match exactly); GEGLU bit for bit (the CPU's GELU table); RMSNorm, SiLU*up, attention with F32 outputs: relative L2
// error < 1e-5 (attention 1e-4: expf and a different reduction order); RoPE (with and without
// rope_freqs factors): 1e-4 absolute against the CPU's float table (1e-3 on queries, rounded to
// fp16); GEMM: < 2e-3 (F16) and < 1e-2 (BF16) against float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "gpu/cpu/attention.hpp"
#include "gpu/cpu/geglu.hpp"
#include "model/fp16.hpp"
#include "gpu/cpu/matmul.hpp"
#include "gpu/cpu/rmsnorm.hpp"
#include "gpu/cpu/rope.hpp"
#include "gpu/cpu/sampler.hpp"
#include "gpu/cpu/swiglu.hpp"
#include "gpu/cuda/attention.cuh"
#include "gpu/cuda/dequantize.cuh"
#include "gpu/cuda/embedding.cuh"
#include "gpu/cuda/geglu_mul.cuh"
#include "gpu/cuda/gemm.hpp"
#include "gpu/cuda/kv_write.cuh"
#include "gpu/cuda/rmsnorm.cuh"
#include "gpu/cuda/rope.cuh"
#include "gpu/cuda/sampling.cuh"
#include "gpu/cuda/silu_mul.cuh"
#include "gpu/cuda/step_inputs.hpp"
#include "gpu/fp8_e4m3.hpp"
#include "model/llama_config.hpp"
#include "tests/gpu/cpu_test_util.hpp"
#include "tests/gpu/cuda_attention_util.hpp"
#include "tests/gpu/cuda_test_util.hpp"

namespace troupe::gpu::cuda {
namespace {

using cuda::testing::AttentionShape;
using cuda::testing::device_attention;
using cuda::testing::DeviceArray;
using cuda::testing::fp16_view;
using cuda::testing::make_paged_batch;
using cuda::testing::PagedBatch;
using cuda::testing::reference_attention;
using cuda::testing::relative_error;
using model::TensorType;

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  return cpu::testing::random_floats(n, seed, scale);
}

float act_to_float(uint16_t bits, ActType t) {
  return t == ActType::kF16 ? model::fp16_to_fp32(bits) : model::bf16_to_fp32(bits);
}

// Every weight type the CUDA backend reads; each is compared with its CPU twin
// (cpu::dequantize_row: the reference dequantizers of model/quants/).
const TensorType kTypes[] = {TensorType::kF32,  TensorType::kF16,  TensorType::kBF16,
                             TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_1,
                             TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kQ4_K,
                             TensorType::kQ5_K, TensorType::kQ6_K};

// Row widths a type can have: 32-element blocks take all, 256-element super-blocks the
// multiples of 256.
bool fits(TensorType type, int64_t cols) { return cols % model::traits_of(type).block_elements == 0; }

class CudaDequantize : public ::testing::TestWithParam<TensorType> {};

TEST_P(CudaDequantize, MatchesCpuWithinOneUlp) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const TensorType type = GetParam();
  uint64_t seed = 1;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{3, 32}, {17, 256}, {64, 576}, {9, 1536}}) {
    if (!fits(type, cols)) continue;
    const std::vector<uint8_t> raw = cpu::testing::random_weights(type, rows, cols, seed++);
    std::vector<float> want(rows * cols);
    const size_t row_bytes = model::row_bytes(type, cols);
    for (int64_t r = 0; r < rows; ++r) cpu::dequantize_row(type, raw.data() + r * row_bytes, cols, &want[r * cols]);
    DeviceArray<uint8_t> d_raw(raw);
    for (ActType act : {ActType::kF16, ActType::kBF16}) {
      DeviceArray<uint16_t> out(rows * cols);
      dequantize_matrix(d_raw.get(), static_cast<WeightType>(type), rows, cols, out.get(), act, nullptr);
      const std::vector<uint16_t> got = out.download();
      const double ulp = act == ActType::kF16 ? 1.0 / 1024 : 1.0 / 128;
      for (int64_t i = 0; i < rows * cols; ++i) {
        const float g = act_to_float(got[i], act);
        ASSERT_FALSE(std::isnan(g)) << "unwritten element " << i;
        ASSERT_LE(std::fabs(g - want[i]), ulp * std::fabs(want[i]) + 1e-7)
            << model::tensor_type_name(type) << " " << rows << "x" << cols << " element " << i;
      }
    }
  }
}

TEST_P(CudaDequantize, EmbeddingGatherMatchesCpuDequantize) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const TensorType type = GetParam();
  const int64_t vocab = 300;
  for (int64_t n_embd : {64, 256, 576, 768}) {
    if (!fits(type, n_embd)) continue;
    const std::vector<uint8_t> raw = cpu::testing::random_weights(type, vocab, n_embd, 7);
    const std::vector<int32_t> ids = {0, 299, 5, 5, 123, 42, 7};
    DeviceArray<uint8_t> d_raw(raw);
    DeviceArray<int32_t> d_ids(ids);
    DeviceArray<float> out(ids.size() * n_embd);
    const int64_t row_bytes = static_cast<int64_t>(model::row_bytes(type, n_embd));
    embedding_gather(d_raw.get(), static_cast<WeightType>(type), row_bytes, static_cast<int32_t>(n_embd),
                     d_ids.get(), static_cast<int32_t>(ids.size()), out.get(), nullptr);
    const std::vector<float> got = out.download();
    std::vector<float> want(ids.size() * n_embd);
    for (size_t t = 0; t < ids.size(); ++t) cpu::dequantize_row(type, raw.data() + ids[t] * row_bytes, n_embd, &want[t * n_embd]);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_LE(std::fabs(got[i] - want[i]), 1e-6 * std::fabs(want[i]) + 1e-7) << model::tensor_type_name(type) << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaDequantize, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(model::tensor_type_name(info.param)); });

// Every type the backend accepts has a device decoder; the rest are refused by name.
TEST(CudaWeightTypes, AcceptsEveryDecodedTypeOnly) {
  for (TensorType type : kTypes) EXPECT_TRUE(is_cuda_weight_type(static_cast<uint32_t>(type))) << model::tensor_type_name(type);
  for (TensorType type : {TensorType::kQ2_K, TensorType::kQ3_K, TensorType::kQ8_1, TensorType::kQ8_K}) {
    EXPECT_FALSE(is_cuda_weight_type(static_cast<uint32_t>(type))) << model::tensor_type_name(type);
  }
}

TEST(CudaOps, RmsNormMatchesFloat64Reference) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  for (int32_t n : {64, 576, 4096}) {
    const int32_t rows = 9;
    const std::vector<float> x = randn(static_cast<size_t>(rows) * n, n, 3.0f);
    const std::vector<float> w = randn(n, n + 1);
    DeviceArray<float> d_x(x), d_w(w), out(static_cast<size_t>(rows) * n);
    RmsNormArgs a;
    a.x = d_x.get();
    a.ld_x = n;
    a.num_rows = rows;
    a.weight = d_w.get();
    a.n = n;
    a.eps = 1e-5f;
    a.out_f32 = out.get();
    a.ld_out = n;
    rmsnorm_rows(a, nullptr);
    std::vector<float> want(x.size());
    for (int32_t r = 0; r < rows; ++r) cpu::rmsnorm_reference(&x[r * n], w.data(), &want[r * n], n, 1e-5f);
    EXPECT_LT(relative_error(out.download(), want), 1e-5) << "n " << n;

    // Gathered rows (the sampling rows' final norm) into F16.
    const std::vector<int32_t> pick = {8, 0, 3};
    DeviceArray<int32_t> d_pick(pick);
    DeviceArray<uint16_t> out16(pick.size() * n);
    a.row_index = d_pick.get();
    a.num_rows = 3;
    a.out_f32 = nullptr;
    a.out_act = out16.get();
    a.act_type = ActType::kF16;
    rmsnorm_rows(a, nullptr);
    const std::vector<uint16_t> got16 = out16.download();
    std::vector<float> got(got16.size()), want_pick;
    for (size_t i = 0; i < got16.size(); ++i) got[i] = model::fp16_to_fp32(got16[i]);
    for (int32_t r : pick) want_pick.insert(want_pick.end(), want.begin() + r * n, want.begin() + (r + 1) * n);
    EXPECT_LT(relative_error(got, want_pick), 1e-3) << "n " << n;
  }
}

TEST(CudaOps, RopeMatchesCpuTableAndRoundsQueries) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  struct Shape {
    int32_t n_head, n_head_kv, head_dim, n_rot;
    float base;
  };
  for (const Shape s : {Shape{9, 3, 64, 64, 100000.0f}, Shape{32, 8, 128, 128, 500000.0f}, Shape{4, 2, 64, 32, 10000.0f}}) {
    // rope_freqs.weight (Llama 3.1+): none, and Meta's llama3 factors for Llama 3.2.
    const std::vector<float> factors =
        model::llama3_rope_freq_factors(s.n_rot, s.base, {32.0f, 1.0f, 4.0f, 8192});
    DeviceArray<float> d_factors(factors);
    for (int variant = 0; variant < 4; ++variant) {
      const bool neox = variant % 2 == 1, with_factors = variant >= 2;
      const int32_t T = 7;
      const int64_t Q = s.n_head * s.head_dim, KV = s.n_head_kv * s.head_dim, W = Q + 2 * KV;
      const std::vector<int32_t> positions = {0, 1, 2, 17, 255, 1000, 4095};
      std::vector<float> qkv = randn(T * W, s.head_dim + neox);
      DeviceArray<float> d_qkv(qkv);
      DeviceArray<int32_t> d_pos(positions);
      RopeArgs a;
      a.qkv = d_qkv.get();
      a.ld = W;
      a.positions = d_pos.get();
      a.num_tokens = T;
      a.n_head = s.n_head;
      a.n_head_kv = s.n_head_kv;
      a.head_dim = s.head_dim;
      a.n_rot = s.n_rot;
      a.freq_base = s.base;
      a.freq_factors = with_factors ? d_factors.get() : nullptr;
      a.neox = neox;
      a.round_q_to_f16 = true;
      rope_inplace(a, nullptr);
      const std::vector<float> got = d_qkv.download();
      const cpu::RopeParams p{s.n_rot, s.base, 1.0f, with_factors ? factors.data() : nullptr};
      std::vector<float> cs(s.n_rot / 2), sn(s.n_rot / 2);
      for (int32_t t = 0; t < T; ++t) {
        float* row = &qkv[t * W];
        cpu::rope_table(positions[t], p, cs.data(), sn.data());
        if (neox) {
          cpu::rope_apply_neox(row, s.n_head + s.n_head_kv, s.head_dim, s.n_rot, cs.data(), sn.data());
        } else {
          cpu::rope_apply(row, s.n_head + s.n_head_kv, s.head_dim, s.n_rot, cs.data(), sn.data());
        }
        for (int64_t j = 0; j < W; ++j) {
          const float g = got[t * W + j];
          // Queries were rounded to fp16 (relative 2^-11) after rotating; keys stay F32.
          const double tol = (j < Q ? 1e-3 : 1e-4) * (1 + std::fabs(row[j]));
          ASSERT_NEAR(g, row[j], tol) << "token " << t << " column " << j << " neox " << neox
                                      << " factors " << with_factors;
          if (j < Q) {
            ASSERT_EQ(g, model::fp16_to_fp32(model::fp32_to_fp16(g))) << "query not fp16-valued";
          }
        }
      }
    }
  }
}

TEST(CudaOps, SiluMulMatchesFloat64Reference) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  for (int32_t n_ff : {64, 1536, 14336}) {
    const int32_t T = 5;
    const std::vector<float> gu = randn(static_cast<size_t>(T) * 2 * n_ff, n_ff, 4.0f);
    DeviceArray<float> d_gu(gu), out(static_cast<size_t>(T) * n_ff);
    silu_mul(d_gu.get(), T, n_ff, out.get(), ActType::kF16, /*out_f32=*/true, nullptr);
    std::vector<float> want(static_cast<size_t>(T) * n_ff);
    for (int32_t t = 0; t < T; ++t) cpu::swiglu_reference(&gu[t * 2 * n_ff], &gu[t * 2 * n_ff + n_ff], &want[t * n_ff], n_ff);
    EXPECT_LT(relative_error(out.download(), want), 1e-5);
  }
}

// GEGLU reads the CPU's own GELU table, so it equals the CPU twin bit for bit, past the +-10
// cut-offs too.
TEST(CudaOps, GegluMulEqualsTheCpuTwinBitForBit) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  std::vector<uint16_t> table(65536);
  for (uint32_t h = 0; h < table.size(); ++h) {
    table[h] = cpu::gelu_fp16_table_entry(static_cast<uint16_t>(h));
  }
  DeviceArray<uint16_t> d_table(table);
  for (int32_t n_ff : {64, 1536, 2048}) {
    const int32_t T = 5;
    std::vector<float> gu = randn(static_cast<size_t>(T) * 2 * n_ff, n_ff + 7, 4.0f);
    gu[0] = -12.5f, gu[1] = 10.0f, gu[2] = -10.0f, gu[3] = 11.25f, gu[4] = 0.0f, gu[5] = -9.999f;
    DeviceArray<float> d_gu(gu), out(static_cast<size_t>(T) * n_ff);
    geglu_mul(d_gu.get(), T, n_ff, d_table.get(), out.get(), ActType::kF16, /*out_f32=*/true,
              nullptr);
    std::vector<float> want(static_cast<size_t>(T) * n_ff);
    for (int32_t t = 0; t < T; ++t) {
      cpu::geglu(&gu[t * 2 * n_ff], &gu[t * 2 * n_ff + n_ff], &want[t * n_ff], n_ff);
    }
    const std::vector<float> got = out.download();
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), 4 * want.size())) << "n_ff " << n_ff;
  }
}

// One KV write case: n_kv heads of hd values in num_blocks blocks of bs slots; T tokens whose
// fused QKV rows hold Q query columns, then K, then V.
struct KvWriteCase {
  int32_t n_kv, hd, bs, num_blocks, T;
  int64_t Q;
  int64_t KV() const { return int64_t{n_kv} * hd; }
  int64_t W() const { return Q + 2 * KV(); }
  size_t cache() const { return static_cast<size_t>(num_blocks) * n_kv * bs * hd; }
};

// T distinct slots of the cache, shuffled.
std::vector<int32_t> random_slots(const KvWriteCase& c, uint32_t seed) {
  std::vector<int32_t> all(c.num_blocks * c.bs);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937(seed));
  return {all.begin(), all.begin() + c.T};
}

// kv_write of `qkv` into fresh caches of `Element` (uint16_t: fp16, uint8_t: E4M3); their bytes.
template <class Element>
std::pair<std::vector<Element>, std::vector<Element>> run_kv_write(
    const KvWriteCase& c, const std::vector<float>& qkv, const std::vector<int32_t>& slots,
    KvElement element = KvElement::kF16, float k_scale = 1.0f, float v_scale = 1.0f) {
  DeviceArray<float> d_qkv(qkv);
  DeviceArray<int32_t> d_slots(slots);
  DeviceArray<Element> k(c.cache()), v(c.cache());
  KvWriteArgs a;
  a.qkv = d_qkv.get();
  a.ld = c.W();
  a.k_column = c.Q;
  a.v_column = c.Q + c.KV();
  a.slot_mapping = d_slots.get();
  a.num_tokens = c.T;
  a.n_head_kv = c.n_kv;
  a.head_dim = c.hd;
  a.block_size = c.bs;
  a.k_cache = k.get();
  a.v_cache = v.get();
  a.element = element;
  a.k_scale = k_scale;
  a.v_scale = v_scale;
  kv_write(a, nullptr);
  return {k.download(), v.download()};
}

TEST(CudaOps, KvWriteStoresFp16AtMappedSlots) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const KvWriteCase c{3, 64, 16, 8, 20, 9 * 64};
  const int32_t n_kv = c.n_kv, hd = c.hd, bs = c.bs, num_blocks = c.num_blocks, T = c.T;
  const int64_t Q = c.Q, KV = c.KV(), W = c.W();
  const size_t cache = c.cache();
  const std::vector<float> qkv = randn(T * W, 11);
  const std::vector<int32_t> slots = random_slots(c, 3);
  const auto [gk, gv] = run_kv_write<uint16_t>(c, qkv, slots);
  cpu::KvLayerView view;
  view.num_blocks = num_blocks;
  view.block_size = bs;
  view.num_kv_heads = n_kv;
  view.head_dim = hd;
  std::set<size_t> written;
  for (int32_t t = 0; t < T; ++t) {
    for (int32_t h = 0; h < n_kv; ++h) {
      const size_t at = view.offset(slots[t] / bs, h, slots[t] % bs);
      for (int32_t d = 0; d < hd; ++d) {
        ASSERT_EQ(gk[at + d], model::fp32_to_fp16(qkv[t * W + Q + h * hd + d]));
        ASSERT_EQ(gv[at + d], model::fp32_to_fp16(qkv[t * W + Q + KV + h * hd + d]));
        written.insert(at + d);
      }
    }
  }
  for (size_t i = 0; i < cache; ++i) {
    if (!written.count(i)) {
      ASSERT_EQ(gk[i], 0xFFFF) << "write outside the mapped slots at " << i;
    }
  }
}

TEST(CudaOps, PagedAttentionMixedBatchMatchesFloat64Reference) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  for (const AttentionShape s : {AttentionShape{9, 3, 64}, AttentionShape{32, 8, 128},
                                 AttentionShape{4, 4, 32}, AttentionShape{8, 1, 96}}) {
    const int32_t bs = 16, num_blocks = 160;
    // Sequences: (context_len, num_tokens): a long prefill chunk on a cached prefix, decodes.
    const PagedBatch batch = make_paged_batch({{1, 1}, {40, 40}, {300, 1}, {1000, 37}, {17, 1}},
                                              bs, num_blocks, static_cast<uint32_t>(s.head_dim));
    const size_t cache = static_cast<size_t>(num_blocks) * s.n_head_kv * bs * s.head_dim;
    auto [k, v] = cuda::testing::random_fp16_cache(cache, 5, 6);
    const std::vector<float> q =
        cuda::testing::random_fp16_queries(batch.num_tokens() * s.n_head * s.head_dim, 9);
    DeviceArray<uint16_t> dk(k), dv(v);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    const std::vector<float> got = device_attention(batch, q, dk.get(), dv.get(), s, bs, scale);
    const std::vector<float> want =
        reference_attention(fp16_view(k, v, num_blocks, bs, s), batch, q, s, scale);
    EXPECT_LT(relative_error(got, want), 1e-4) << "heads " << s.n_head << "/" << s.n_head_kv << " dim " << s.head_dim;
  }
}

TEST(CudaOps, KvWriteStoresFp8E4M3LikeItsCpuTwin) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const KvWriteCase c{2, 128, 16, 6, 23, 4 * 128};
  const int32_t n_kv = c.n_kv, hd = c.hd, bs = c.bs, num_blocks = c.num_blocks, T = c.T;
  const int64_t Q = c.Q, KV = c.KV(), W = c.W();
  std::vector<float> qkv = randn(T * W, 21);
  for (size_t i = 0; i < qkv.size(); i += 97) qkv[i] *= 900.0f;  // beyond E4M3's range
  const std::vector<int32_t> slots = random_slots(c, 5);
  const float k_scale = 0.5f, v_scale = 3.0f;
  const auto [gk, gv] =
      run_kv_write<uint8_t>(c, qkv, slots, KvElement::kFp8E4M3, k_scale, v_scale);
  cpu::KvLayerView view;  // its offsets count elements, whatever their size
  view.num_blocks = num_blocks;
  view.block_size = bs;
  view.num_kv_heads = n_kv;
  view.head_dim = hd;
  int saturated = 0;
  for (int32_t t = 0; t < T; ++t) {
    for (int32_t h = 0; h < n_kv; ++h) {
      const size_t at = view.offset(slots[t] / bs, h, slots[t] % bs);
      for (int32_t d = 0; d < hd; ++d) {
        const float kx = qkv[t * W + Q + h * hd + d], vx = qkv[t * W + Q + KV + h * hd + d];
        ASSERT_EQ(gk[at + d], fp32_to_fp8_e4m3(kx / k_scale)) << "k " << kx;
        ASSERT_EQ(gv[at + d], fp32_to_fp8_e4m3(vx / v_scale)) << "v " << vx;
        saturated += (gk[at + d] & 0x7F) == 0x7E;
      }
    }
  }
  EXPECT_GT(saturated, 0) << "the test meant to cover saturation";
}

// Attention reading an FP8 cache against its CPU twin: the E4M3 values widened to fp16 (exact)
// through the fp16 reference, k_scale folded into the score scale and v_scale into the output.
TEST(CudaOps, PagedAttentionReadsAnFp8CacheLikeItsCpuTwin) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  for (const AttentionShape s : {AttentionShape{9, 3, 64}, AttentionShape{4, 1, 128},
                                 AttentionShape{4, 4, 32}, AttentionShape{8, 1, 96}}) {
    const int32_t bs = 16, num_blocks = 96;
    const PagedBatch batch = make_paged_batch({{1, 1}, {40, 40}, {700, 1}, {300, 21}}, bs,
                                              num_blocks, static_cast<uint32_t>(s.head_dim + 1));
    const size_t cache = static_cast<size_t>(num_blocks) * s.n_head_kv * bs * s.head_dim;
    const float k_scale = 0.75f, v_scale = 1.5f;
    std::vector<uint8_t> k8(cache), v8(cache);
    std::vector<uint16_t> k16(cache), v16(cache);  // the twin's view: the same values in fp16
    const std::vector<float> kf = randn(cache, 15), vf = randn(cache, 16);
    for (size_t i = 0; i < cache; ++i) {
      k8[i] = fp32_to_fp8_e4m3(kf[i] / k_scale);
      v8[i] = fp32_to_fp8_e4m3(vf[i] / v_scale);
      k16[i] = model::fp32_to_fp16(fp8_e4m3_to_fp32(k8[i]));
      v16[i] = model::fp32_to_fp16(fp8_e4m3_to_fp32(v8[i]));
    }
    const std::vector<float> q =
        cuda::testing::random_fp16_queries(batch.num_tokens() * s.n_head * s.head_dim, 19);
    DeviceArray<uint8_t> dk(k8), dv(v8);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    const std::vector<float> got = device_attention(batch, q, dk.get(), dv.get(), s, bs, scale,
                                                    KvElement::kFp8E4M3, k_scale, v_scale);
    std::vector<float> want =
        reference_attention(fp16_view(k16, v16, num_blocks, bs, s), batch, q, s, scale * k_scale);
    for (float& y : want) y *= v_scale;
    EXPECT_LT(relative_error(got, want), 1e-4)
        << "heads " << s.n_head << "/" << s.n_head_kv << " dim " << s.head_dim;
  }
}

TEST(CudaOps, GemmRowsMatchesFloat64Reference) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  cublasHandle_t handle = nullptr;
  CUBLAS_CHECK(cublasCreate(&handle));
  struct Shape {
    int32_t rows, n_out, k;
  };
  for (const Shape s : {Shape{1, 576, 576}, Shape{7, 1536, 576}, Shape{64, 200, 320}}) {
    for (ActType act : {ActType::kF16, ActType::kBF16}) {
      for (bool add_to_output : {false, true}) {
        const std::vector<float> wf = randn(static_cast<size_t>(s.n_out) * s.k, 1, 0.05f);
        const std::vector<float> xf = randn(static_cast<size_t>(s.rows) * s.k, 2);
        const std::vector<float> y0 = randn(static_cast<size_t>(s.rows) * s.n_out, 3);
        auto to_act = [&](const std::vector<float>& f, std::vector<float>& rounded) {
          std::vector<uint16_t> bits(f.size());
          rounded.resize(f.size());
          for (size_t i = 0; i < f.size(); ++i) {
            bits[i] = act == ActType::kF16 ? model::fp32_to_fp16(f[i]) : model::fp32_to_bf16(f[i]);
            rounded[i] = act_to_float(bits[i], act);
          }
          return bits;
        };
        std::vector<float> wr, xr;
        DeviceArray<uint16_t> dw(to_act(wf, wr)), dx(to_act(xf, xr));
        DeviceArray<float> dy(y0);
        gemm_rows(handle, GemmArgs{.activation_type = act, .weight = dw.get(), .input = dx.get(),
                                   .input_stride = s.k, .output = dy.get(),
                                   .output_stride = s.n_out, .num_rows = s.rows, .input_dim = s.k,
                                   .output_dim = s.n_out, .add_to_output = add_to_output});
        std::vector<double> want(y0.size());
        for (int32_t r = 0; r < s.rows; ++r) {
          for (int32_t o = 0; o < s.n_out; ++o) {
            double acc = add_to_output ? y0[r * s.n_out + o] : 0.0;
            for (int32_t i = 0; i < s.k; ++i) acc += static_cast<double>(wr[o * s.k + i]) * xr[r * s.k + i];
            want[r * s.n_out + o] = acc;
          }
        }
        EXPECT_LT(relative_error(dy.download(), want), act == ActType::kF16 ? 2e-3 : 1e-2)
            << s.rows << "x" << s.n_out << "x" << s.k << " add_to_output " << add_to_output;
      }
    }
  }
  cublasDestroy(handle);
}

// The sampler against the CPU reference on identical logits: greedy exactly; sampled tokens,
// logprobs and top alternatives in (nearly) every row.
TEST(CudaOps, SamplingAgreesWithCpuSampler) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const int32_t V = 5000;
  std::vector<model::SamplingParams> kinds;
  auto add = [&](float temperature, int32_t top_k, float top_p, float min_p, float rep, float freq) {
    model::SamplingParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.repetition_penalty = rep;
    p.frequency_penalty = freq;
    p.presence_penalty = freq / 2;
    p.logprobs = true;
    p.top_logprobs = 5;
    kinds.push_back(p);
  };
  add(0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f);     // greedy
  add(1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f);     // plain draw, id-order walk
  add(0.7f, 40, 1.0f, 0.0f, 1.0f, 0.0f);    // top-k
  add(0.9f, 0, 0.9f, 0.0f, 1.0f, 0.0f);     // top-p
  add(1.2f, 0, 1.0f, 0.05f, 1.0f, 0.0f);    // min-p
  add(0.8f, 50, 0.95f, 0.02f, 1.3f, 0.2f);  // everything, with penalties
  // logit_bias (bans the tie rows' maxima at 10 and 20, lifts 123) and the min_tokens mask
  // (end ids 7, 8 and 10 while num_generated < 4), greedy and sampled.
  for (const size_t base : {size_t{0}, kinds.size() - 1}) {
    model::SamplingParams p = kinds[base];
    p.logit_bias = {{10, -100.0f}, {20, -100.0f}, {123, 6.0f}, {V + 5, 100.0f}};
    p.min_tokens = 4;
    kinds.push_back(p);
  }
  const int32_t per_kind = 24;
  const int32_t rows = static_cast<int32_t>(kinds.size()) * per_kind;
  std::vector<float> logits = randn(static_cast<size_t>(rows) * V, 77, 3.0f);
  for (int32_t r = 0; r < rows; r += 5) logits[r * V + 10] = logits[r * V + 20] = 50.0f;  // exact ties
  std::mt19937 rng(5);
  std::vector<int32_t> recent;
  std::vector<SamplingRowParams> params(rows);
  std::vector<SamplingSlot> slots(rows);
  std::vector<int32_t> bias_ids, end_ids;
  std::vector<float> bias_values;
  for (int32_t r = 0; r < rows; ++r) {
    SamplingSlot& slot = slots[r];
    slot.params = kinds[r / per_kind];
    slot.params.seed = 1000 + r;
    slot.num_generated = r % 7;
    slot.recent_offset = static_cast<int32_t>(recent.size());
    slot.recent_count = 30;
    for (int i = 0; i < 30; ++i) recent.push_back(static_cast<int32_t>(rng() % 60));
    if (slot.params.min_tokens > 0) slot.end_token_ids = {7, 8, 10};
    SamplingRowParams& q = params[r];
    const model::SamplingParams& p = slot.params;
    q = sampling_row_params(slot);
    q.want_logprob = 1;  // compare logprobs on every row
    q.bias_offset = static_cast<int32_t>(bias_ids.size());
    q.bias_count = static_cast<int32_t>(p.logit_bias.size());
    for (const model::LogitBias& e : p.logit_bias) {
      bias_ids.push_back(e.token_id);
      bias_values.push_back(e.bias);
    }
    q.end_offset = static_cast<int32_t>(end_ids.size());
    if (slot.masks_end_tokens()) {
      q.end_count = static_cast<int32_t>(slot.end_token_ids.size());
      end_ids.insert(end_ids.end(), slot.end_token_ids.begin(), slot.end_token_ids.end());
    }
  }
  DeviceArray<float> d_logits(logits), workspace(logits.size()), lp(rows), top_lp(rows * kMaxTopLogprobs);
  DeviceArray<int32_t> d_recent(recent), tokens(rows), top_ids(rows * kMaxTopLogprobs);
  DeviceArray<int32_t> d_bias_ids(bias_ids), d_end_ids(end_ids);
  DeviceArray<float> d_bias_values(bias_values);
  std::vector<uint8_t> param_bytes(sizeof(SamplingRowParams) * rows);
  std::memcpy(param_bytes.data(), params.data(), param_bytes.size());
  DeviceArray<uint8_t> d_params(param_bytes);
  SamplingArgs a;
  a.logits = d_logits.get();
  a.num_rows = rows;
  a.n_vocab = V;
  a.params = reinterpret_cast<const SamplingRowParams*>(d_params.get());
  a.recent_tokens = d_recent.get();
  a.bias_ids = d_bias_ids.get();
  a.bias_values = d_bias_values.get();
  a.end_token_ids = d_end_ids.get();
  a.workspace = workspace.get();
  a.out_tokens = tokens.get();
  a.out_logprobs = lp.get();
  a.out_top_ids = top_ids.get();
  a.out_top_logprobs = top_lp.get();
  sample_rows(a, nullptr);
  const std::vector<int32_t> got = tokens.download(), got_top = top_ids.download();
  const std::vector<float> got_lp = lp.download(), got_top_lp = top_lp.download();
  cpu::Sampler sampler;
  int disagreements = 0;
  for (int32_t r = 0; r < rows; ++r) {
    const SampledToken want = sampler.sample(std::span<const float>(&logits[r * V], V), slots[r],
                                             std::span<const int32_t>(&recent[slots[r].recent_offset], 30));
    if (slots[r].masks_end_tokens()) {
      ASSERT_TRUE(got[r] != 7 && got[r] != 8 && got[r] != 10) << "row " << r << " sampled masked id " << got[r];
    }
    if (slots[r].params.greedy()) {
      ASSERT_EQ(got[r], want.token_id) << "greedy row " << r;
    } else if (got[r] != want.token_id) {
      ++disagreements;
    }
    // The raw distribution's log-probability of the token the device drew: its logit minus the
    // row's log-sum-exp, which the CPU's own draw gives as logit - logprob (so the two draws need
    // not agree for the logprobs to be compared).
    const float log_sum_exp = logits[r * V + want.token_id] - want.logprob;
    ASSERT_NEAR(got_lp[r], logits[r * V + got[r]] - log_sum_exp, 1e-3) << "row " << r;
    for (int i = 0; i < 5; ++i) {
      ASSERT_EQ(got_top[r * kMaxTopLogprobs + i], want.top_logprobs[i].token_id) << "row " << r << " alt " << i;
      ASSERT_NEAR(got_top_lp[r * kMaxTopLogprobs + i], want.top_logprobs[i].logprob, 1e-3);
    }
  }
  // Equal logits and equal uniforms: only float summation order can move a draw.
  EXPECT_LE(disagreements, rows / 50) << disagreements << " of " << rows << " sampled rows differ from the CPU";
}

}  // namespace
}  // namespace troupe::gpu::cuda
