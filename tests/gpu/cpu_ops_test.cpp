// RMSNorm, SwiGLU, softmax, RoPE, fp16 conversion and the thread pool against plain references.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>

#include "model/fp16.hpp"
#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/rmsnorm.hpp"
#include "gpu/cpu/rope.hpp"
#include "gpu/cpu/vec_math.hpp"
#include "gpu/cpu/softmax.hpp"
#include "gpu/cpu/swiglu.hpp"
#include "gpu/cpu/thread_pool.hpp"
#include "tests/gpu/cpu_test_util.hpp"

namespace troupe::gpu::cpu {
namespace {

const int64_t kSizes[] = {1, 7, 16, 33, 576, 1000, 1536};

// Tolerances: RMSNorm 1e-5 relative (float32 sum of squares vs double); SwiGLU 4e-6 relative
// plus 1e-6 absolute (2-ulp exp); softmax 2e-6 relative per probability.
TEST(RmsNorm, MatchesReference) {
  for (IsaLevel isa : runnable_isas()) {
    for (int64_t n : kSizes) {
      const auto x = testing::random_floats(n, n, 3.0f);
      const auto w = testing::random_floats(n, n + 1);
      std::vector<float> got(n), want(n);
      rmsnorm(x.data(), w.data(), got.data(), n, 1e-5f, isa);
      rmsnorm_reference(x.data(), w.data(), want.data(), n, 1e-5f);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-7) << to_string(isa) << " n=" << n;
      }
    }
  }
}

// Rows at once (their sums side by side in one vector's lanes at AVX-512) keep each row's bits,
// in place too, for row counts around the group of kRmsNormRows and widths with a tail.
TEST(RmsNorm, RowsAtOnceAreBitIdenticalToOneRowEach) {
  for (IsaLevel isa : runnable_isas()) {
    for (int64_t n : kSizes) {
      for (int64_t rows : {1, 7, 8, 9, 16, 17}) {
        const int64_t ld = n + 3;
        const auto x = testing::random_floats(rows * ld, 7 * n + rows, 3.0f);
        const auto w = testing::random_floats(n, n + 2);
        std::vector<float> want(rows * ld, 0.0f), got(rows * ld, 0.0f);
        for (int64_t r = 0; r < rows; ++r) {
          rmsnorm(x.data() + r * ld, w.data(), want.data() + r * ld, n, 1e-5f, IsaLevel::kScalar);
        }
        rmsnorm_rows(x.data(), ld, w.data(), got.data(), ld, rows, n, 1e-5f, isa);
        auto in_place = x;
        rmsnorm_rows(in_place.data(), ld, w.data(), in_place.data(), ld, rows, n, 1e-5f, isa);
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(0, std::memcmp(want.data() + r * ld, got.data() + r * ld, 4 * n))
              << to_string(isa) << " n=" << n << " rows=" << rows << " row " << r;
          ASSERT_EQ(0, std::memcmp(want.data() + r * ld, in_place.data() + r * ld, 4 * n))
              << "in place, " << to_string(isa) << " n=" << n << " rows=" << rows << " row " << r;
        }
      }
    }
  }
}

TEST(SwiGlu, MatchesReference) {
  for (IsaLevel isa : runnable_isas()) {
    for (int64_t n : kSizes) {
      auto g = testing::random_floats(n, 5 + n, 4.0f);
      if (n > 3) g[0] = -100.0f, g[1] = 100.0f, g[2] = 0.0f;
      const auto u = testing::random_floats(n, 9 + n);
      std::vector<float> got(n), want(n);
      swiglu(g.data(), u.data(), got.data(), n, isa);
      swiglu_reference(g.data(), u.data(), want.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(got[i], want[i], 4e-6 * std::fabs(want[i]) + 1e-6) << to_string(isa) << " i=" << i;
      }
    }
  }
}

TEST(Softmax, MatchesReference) {
  for (IsaLevel isa : runnable_isas()) {
    for (int64_t n : kSizes) {
      auto a = testing::random_floats(n, 2 * n, 5.0f);
      if (n > 2) a[1] = -80.0f;
      auto b = a;
      softmax(a.data(), n, isa);
      softmax_reference(b.data(), n);
      double total = 0;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(a[i], b[i], 2e-6 * b[i] + 1e-9) << to_string(isa);
        total += a[i];
      }
      EXPECT_NEAR(total, 1.0, 1e-5);
    }
  }
}

TEST(Rope, MatchesReferenceIncludingPassThroughDims) {
  const RopeParams p{32, 100000.0f, 0.5f};  // n_rot 32 of head_dim 48; linear scale 2
  for (int32_t pos : {0, 1, 17, 300, 4000}) {
    auto a = testing::random_floats(3 * 48, pos + 1);
    auto b = a;
    std::vector<float> c(16), s(16);
    rope_table(pos, p, c.data(), s.data());
    rope_apply(a.data(), 3, 48, 32, c.data(), s.data());
    rope_reference(b.data(), 3, 48, pos, p);
    for (int i = 0; i < 3 * 48; ++i) {
      // Float theta accumulates ~1e-6 relative error per step: at pos 4000 that is ~4e-3 rad.
      ASSERT_NEAR(a[i], b[i], 5e-6 * (1 + pos)) << "pos " << pos << " i " << i;
    }
    // Dims 32..47 of each head untouched.
    auto orig = testing::random_floats(3 * 48, pos + 1);
    for (int h = 0; h < 3; ++h)
      for (int d = 32; d < 48; ++d) ASSERT_EQ(a[h * 48 + d], orig[h * 48 + d]);
  }
}

TEST(Rope, AdjacentPairsRotate) {
  // NORM mode pairs (0,1): at pos 1 with n_rot 2, theta = 1 rad.
  float x[2] = {1.0f, 0.0f};
  float c, s;
  rope_table(1, {2, 10000.0f, 1.0f}, &c, &s);
  rope_apply(x, 1, 2, 2, &c, &s);
  EXPECT_NEAR(x[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(x[1], std::sin(1.0), 1e-6);
}

#if TROUPE_X86
TROUPE_TARGET_AVX2 uint16_t hw_fp16(float f) {
  return static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), 0), 0));
}
TROUPE_TARGET_AVX2 float hw_fp32(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

TEST(Fp16, MatchesF16cOnEveryHalfAndRandomFloats) {
  if (supported_isa() < IsaLevel::kAvx2) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = model::fp16_to_fp32(static_cast<uint16_t>(h)), b = hw_fp32(static_cast<uint16_t>(h));
    if (std::isnan(b)) {
      ASSERT_TRUE(std::isnan(a));
    } else {
      ASSERT_EQ(std::memcmp(&a, &b, 4), 0) << h;
    }
  }
  std::mt19937 rng(1);
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(model::fp32_to_fp16(f), hw_fp16(f)) << f;
  }
}
#endif

// Ranges are claimed dynamically: every item exactly once, thread indices in range and never
// used by two threads at once (kernels keep per-thread scratch by index), many jobs in a row.
// SwiGLU at every isa gives the scalar ggml_silu's bits, including exp's overflow and
// underflow ranges.
TEST(SwiGlu, AllPathsMatchScalarBitExact) {
  for (int64_t n : kSizes) {
    auto g = testing::random_floats(n, n + 5, 12.0f);
    const auto u = testing::random_floats(n, n + 6);
    if (n > 6) g[1] = 100.0f, g[2] = -100.0f, g[3] = 88.5f, g[4] = -88.5f, g[5] = 0.0f, g[6] = -0.0f;
    std::vector<float> want(n);
    swiglu(g.data(), u.data(), want.data(), n, IsaLevel::kScalar);
    for (IsaLevel isa : runnable_isas()) {
      std::vector<float> got(n);
      swiglu(g.data(), u.data(), got.data(), n, isa);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), 4 * n)) << to_string(isa) << " n=" << n;
    }
  }
}

// Both RoPE modes at every isa give the scalar form's bits (full 8-pair groups and tails).
TEST(Rope, AllPathsMatchScalarBitExact) {
  struct Case {
    int32_t heads, head_dim, n_rot;
  };
  for (const Case& cs : {Case{9, 64, 64}, Case{3, 48, 32}, Case{2, 24, 18}, Case{1, 128, 100}}) {
    for (int32_t pos : {0, 1, 17, 4095}) {
      std::vector<float> c(cs.n_rot / 2), s(cs.n_rot / 2);
      rope_table(pos, {cs.n_rot, 10000.0f, 1.0f}, c.data(), s.data());
      const auto x = testing::random_floats(static_cast<size_t>(cs.heads) * cs.head_dim, pos + 3, 4.0f);
      for (bool neox : {false, true}) {
        auto want = x;
        if (neox) {
          rope_apply_neox(want.data(), cs.heads, cs.head_dim, cs.n_rot, c.data(), s.data(), IsaLevel::kScalar);
        } else {
          rope_apply(want.data(), cs.heads, cs.head_dim, cs.n_rot, c.data(), s.data(), IsaLevel::kScalar);
        }
        for (IsaLevel isa : runnable_isas()) {
          auto got = x;
          if (neox) {
            rope_apply_neox(got.data(), cs.heads, cs.head_dim, cs.n_rot, c.data(), s.data(), isa);
          } else {
            rope_apply(got.data(), cs.heads, cs.head_dim, cs.n_rot, c.data(), s.data(), isa);
          }
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), 4 * got.size()))
              << to_string(isa) << " neox=" << neox << " n_rot=" << cs.n_rot;
        }
      }
    }
  }
}

// Row fp16 conversions: the scalar bits at every isa, with subnormals, overflow, inf and NaN.
TEST(Fp16Rows, AllPathsMatchScalarBitExact) {
  auto x = testing::random_floats(1003, 9, 8.0f);
  const float specials[] = {0.0f, -0.0f, 1e-8f, -3e-6f, 6.1e-5f, 65504.0f, 65520.0f, 1e6f,
                            INFINITY, -INFINITY, NAN, -NAN, 5.96e-8f, 2.98e-8f, 1.5f, -7.25f};
  for (size_t i = 0; i < std::size(specials); ++i) x[7 * i] = specials[i];
  std::vector<uint16_t> want_bits(x.size());
  store_fp16(x.data(), want_bits.data(), static_cast<int64_t>(x.size()), IsaLevel::kScalar);
  auto want = x;
  round_to_fp16(want.data(), static_cast<int64_t>(want.size()), IsaLevel::kScalar);
  for (IsaLevel isa : runnable_isas()) {
    std::vector<uint16_t> bits(x.size());
    store_fp16(x.data(), bits.data(), static_cast<int64_t>(x.size()), isa);
    ASSERT_EQ(want_bits, bits) << to_string(isa);
    auto got = x;
    round_to_fp16(got.data(), static_cast<int64_t>(got.size()), isa);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), 4 * got.size())) << to_string(isa);
  }
}

TEST(ThreadPool, CoversEveryItemOnceWithExclusiveThreadIndices) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 200; ++rep) {
      for (int64_t n : {1, 2, 5, 100, 1001}) {
        std::vector<std::atomic<int>> hits(n);
        std::vector<std::atomic<int>> busy(threads);
        pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
          ASSERT_GE(t, 0);
          ASSERT_LT(t, threads);
          EXPECT_EQ(busy[t].fetch_add(1), 0);
          for (int64_t i = b; i < e; ++i) hits[i]++;
          busy[t].fetch_sub(1);
        });
        for (auto& h : hits) ASSERT_EQ(h.load(), 1);
      }
    }
  }
}

}  // namespace
}  // namespace troupe::gpu::cpu
