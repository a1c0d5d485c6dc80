// Paged attention against a float64 reference, scattered blocks against contiguous ones, and
// GQA grouping.
#include "gpu/cpu/attention.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "tests/gpu/cpu_test_util.hpp"

namespace troupe::gpu::cpu {
namespace {

struct Cache {
  std::vector<uint16_t> k, v;
  KvLayerView view;
  Cache(int32_t blocks, int32_t block_size, int32_t kv_heads, int32_t hd) {
    view.num_blocks = blocks;
    view.block_size = block_size;
    view.num_kv_heads = kv_heads;
    view.head_dim = hd;
    k.assign(view.block_elements() * blocks, 0);
    v.assign(view.block_elements() * blocks, 0);
    view.k = k.data();
    view.v = v.data();
  }
};

// Writes `n` tokens of random K/V into cache through `table`; returns them for reuse.
std::vector<float> fill(Cache& c, const std::vector<int32_t>& table, int32_t n, uint64_t seed) {
  const int32_t row = c.view.num_kv_heads * c.view.head_dim;
  auto kv = testing::random_floats(static_cast<size_t>(2) * n * row, seed);
  for (int32_t t = 0; t < n; ++t) {
    kv_store(c.view, table[t / c.view.block_size], t % c.view.block_size, &kv[2 * t * row],
             &kv[(2 * t + 1) * row]);
  }
  return kv;
}

// Tolerance: 2e-5 absolute on outputs of magnitude ~1 (float32 scores and sums vs double).
TEST(Attention, MatchesReferenceForShapesAndLengths) {
  struct Case {
    int32_t kv_heads, group, hd, n;
  };
  for (const Case& cs : {Case{3, 3, 64, 1}, Case{3, 3, 64, 37}, Case{1, 1, 16, 5},
                         Case{2, 4, 128, 100}, Case{1, 2, 24, 19}, Case{8, 4, 64, 300}}) {
    const int32_t bs = 16;
    const int32_t nblocks = (cs.n + bs - 1) / bs;
    Cache c(nblocks + 5, bs, cs.kv_heads, cs.hd);
    std::vector<int32_t> table(nblocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(cs.n));
    for (auto& b : table) b += 3;
    fill(c, table, cs.n, 5);
    const float scale = 1.0f / std::sqrt(static_cast<float>(cs.hd));
    for (int32_t h = 0; h < cs.kv_heads; ++h) {
      const auto q = testing::random_floats(static_cast<size_t>(cs.group) * cs.hd, 100 + h, 2.0f);
      std::vector<float> want(q.size());
      attention_group_reference(c.view, table.data(), cs.n, h, q.data(), cs.group, scale,
                                want.data());
      for (IsaLevel isa : runnable_isas()) {
        std::vector<float> got(q.size()), scratch(static_cast<size_t>(cs.group) * cs.n);
        attention_group(c.view, table.data(), cs.n, h, q.data(), cs.group, scale, got.data(),
                        scratch.data(), isa);
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 2e-5) << to_string(isa) << " n=" << cs.n << " i=" << i;
        }
      }
    }
  }
}

TEST(Attention, ScatteredBlocksEqualContiguousBitExact) {
  const int32_t bs = 16, n = 75, kv_heads = 3, hd = 64, group = 3;
  const int32_t nb = (n + bs - 1) / bs;
  Cache contiguous(nb, bs, kv_heads, hd), scattered(40, bs, kv_heads, hd);
  std::vector<int32_t> t1(nb), t2 = {31, 2, 17, 9, 38};
  std::iota(t1.begin(), t1.end(), 0);
  fill(contiguous, t1, n, 77);
  fill(scattered, t2, n, 77);
  const auto q = testing::random_floats(group * hd, 1);
  for (IsaLevel isa : runnable_isas()) {
    for (int32_t h = 0; h < kv_heads; ++h) {
      std::vector<float> a(group * hd), b(group * hd), s(group * n);
      attention_group(contiguous.view, t1.data(), n, h, q.data(), group, 0.125f, a.data(), s.data(), isa);
      attention_group(scattered.view, t2.data(), n, h, q.data(), group, 0.125f, b.data(), s.data(), isa);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), 4 * a.size())) << to_string(isa);
    }
  }
}

// Every SIMD path is the scalar order exactly: both reduction orders (chunk, decode), with and
// without fp16 probabilities, odd lengths around the 8- and 32-key boundaries, block sizes that
// do not divide them, head sizes that take the SIMD path and ones that fall back.
TEST(Attention, SimdPathsMatchScalarBitExact) {
  struct Case {
    int32_t kv_heads, group, hd, n, bs;
  };
  std::vector<Case> cases;
  for (int32_t n : {1, 2, 7, 8, 9, 31, 32, 33, 40, 64, 65, 100, 301}) {
    cases.push_back({3, 3, 64, n, 16});
    cases.push_back({1, 4, 128, n, 5});
    cases.push_back({2, 1, 32, n, 16});
    cases.push_back({1, 2, 24, n, 7});
    cases.push_back({1, 2, 96, n, 16});
    cases.push_back({1, 1, 16, n, 3});
  }
  for (const Case& cs : cases) {
    const int32_t nblocks = (cs.n + cs.bs - 1) / cs.bs;
    Cache c(nblocks + 2, cs.bs, cs.kv_heads, cs.hd);
    std::vector<int32_t> table(nblocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(cs.n + cs.hd));
    for (auto& b : table) b += 1;
    fill(c, table, cs.n, 11 + cs.n);
    const float scale = 1.0f / std::sqrt(static_cast<float>(cs.hd));
    for (int32_t h = 0; h < cs.kv_heads; ++h) {
      auto q = testing::random_floats(static_cast<size_t>(cs.group) * cs.hd, 200 + h, 3.0f);
      for (float& x : q) x = fp16_to_fp32(fp32_to_fp16(x));
      for (bool single : {false, true}) {
        for (bool fp16p : {false, true}) {
          std::vector<float> want(q.size()), s0(static_cast<size_t>(cs.group) * cs.n);
          attention_group(c.view, table.data(), cs.n, h, q.data(), cs.group, scale, want.data(),
                          s0.data(), IsaLevel::kScalar, fp16p, single);
          for (IsaLevel isa : runnable_isas()) {
            std::vector<float> got(q.size()), s1(s0.size());
            attention_group(c.view, table.data(), cs.n, h, q.data(), cs.group, scale, got.data(),
                            s1.data(), isa, fp16p, single);
            ASSERT_EQ(0, std::memcmp(want.data(), got.data(), 4 * got.size()))
                << to_string(isa) << " hd=" << cs.hd << " n=" << cs.n << " bs=" << cs.bs
                << " single=" << single << " fp16p=" << fp16p;
          }
        }
      }
    }
  }
}

TEST(Attention, SingleKeyReturnsItsValue) {
  Cache c(1, 16, 1, 16);
  std::vector<int32_t> table = {0};
  const auto kv = fill(c, table, 1, 3);
  const auto q = testing::random_floats(16, 4);
  std::vector<float> out(16), s(1);
  attention_group(c.view, table.data(), 1, 0, q.data(), 1, 1.0f, out.data(), s.data(), default_isa());
  for (int d = 0; d < 16; ++d) EXPECT_EQ(out[d], fp16_to_fp32(fp32_to_fp16(kv[16 + d])));
}

}  // namespace
}  // namespace troupe::gpu::cpu
