// The tiled prefill attention's AVX-512 kernels against their scalar twins, bit for bit: the
// scores read from 16-key panels (attention_tiled_kernels.hpp) and the tile softmax. The whole
// tile against the per-token path (scattered KV blocks, every tile split) is in
// cpu_attention_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/cpu/attention_kernels.hpp"
#include "gpu/cpu/attention_tiled.hpp"
#include "gpu/cpu/attention_tiled_kernels.hpp"
#include "gpu/cpu/cpu_features.hpp"
#include "model/fp16.hpp"
#include "tests/gpu/cpu_test_util.hpp"

namespace troupe::gpu::cpu {
namespace {

bool has_avx512() {
  const auto isas = runnable_isas();
  return std::find(isas.begin(), isas.end(), IsaLevel::kAvx512Vnni) != isas.end();
}

float fp16_valued(float x) {
  return model::fp16_to_fp32(model::fp32_to_fp16(x));
}

// A block of keys [first, first + count) as rows [count][hd] and as panels (the block's first
// panel at panels.data()), fp16-valued like converted K.
struct KeyBlock {
  std::vector<float> rows;
  AlignedFloats panels;
  KeyBlock(int32_t first, int32_t count, int32_t hd, uint64_t seed) {
    rows = testing::random_floats(static_cast<size_t>(count) * hd, seed);
    for (float& x : rows) x = fp16_valued(x);
    const int64_t panel_floats =
        detail::panel_offset(first + count - 1, hd) - detail::panel_offset(first, hd) +
        detail::kPanelKeys * hd;
    panels.grow(panel_floats);
    std::fill(panels.data(), panels.data() + panel_floats, 7.0f);  // lanes past the keys
    for (int32_t t = first; t < first + count; ++t) {
      for (int32_t d = 0; d < hd; ++d) {
        panels.data()[detail::panel_offset(t, hd) - detail::panel_offset(first, hd) +
                      d * detail::kPanelKeys + t % detail::kPanelKeys] =
            rows[static_cast<size_t>(t - first) * hd + d];
      }
    }
  }
};

struct ScoreCase {
  int32_t num_rows, group, hd, first, count;
};

// Row r attends keys [0, first + count - spread + r / group + 1): the tile's ragged edge falls
// inside the block, and some rows see none of it when spread is large.
std::vector<int32_t> row_keys(const ScoreCase& cs, int32_t spread) {
  std::vector<int32_t> keys(cs.num_rows);
  for (int32_t r = 0; r < cs.num_rows; ++r) {
    keys[r] = std::max(1, cs.first + cs.count - spread + r / cs.group + 1);
  }
  return keys;
}

// A whole panel widened in registers holds key i's dim d at d * 16 + i, the exact fp16 value,
// for head sizes 16 to 128 (a transposition that swaps two lanes or two dims fails here).
TEST(AttentionTiledPanels, WholePanelConversionTransposesExactly) {
  if (!has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (int32_t hd : {16, 64, 80, 128}) {
    const auto values = testing::random_floats(static_cast<size_t>(detail::kPanelKeys) * hd, 3 + hd);
    std::vector<uint16_t> keys(values.size());
    for (size_t i = 0; i < values.size(); ++i) keys[i] = model::fp32_to_fp16(values[i]);
    AlignedFloats panel;
    panel.grow(detail::kPanelKeys * hd);
    detail::widen_panel_avx512(keys.data(), hd, panel.data());
    for (int32_t i = 0; i < detail::kPanelKeys; ++i) {
      for (int32_t d = 0; d < hd; ++d) {
        const float want = model::fp16_to_fp32(keys[static_cast<size_t>(i) * hd + d]);
        ASSERT_EQ(want, panel.data()[d * detail::kPanelKeys + i])
            << "hd=" << hd << " key=" << i << " dim=" << d;
      }
    }
  }
}

// Scores from panels (scalar twin and AVX-512) equal the row-layout scalar kernel's, which the
// per-token tests tie to llama.cpp's order: row counts that leave 1 or 2 rows over the kernel's
// 3, blocks of 1 to 64 keys starting at panel boundaries, head sizes 16 to 128.
TEST(AttentionTiledPanels, ScoresMatchScalarTwinBitExact) {
  if (!has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::vector<ScoreCase> cases;
  for (int32_t hd : {16, 64, 80, 128}) {
    for (int32_t count : {1, 15, 17, 37, 64}) {
      cases.push_back({7, 3, hd, 0, count});
      cases.push_back({5, 1, hd, 64, count});
      cases.push_back({30, 3, hd, 4032, count});
    }
  }
  for (const ScoreCase& cs : cases) {
    KeyBlock block(cs.first, cs.count, cs.hd, 11 + cs.count + cs.hd);
    auto q = testing::random_floats(static_cast<size_t>(cs.num_rows) * cs.hd, 5 + cs.num_rows, 3.0f);
    for (float& x : q) x = fp16_valued(x);
    for (int32_t spread : {0, 9, 40}) {
      const std::vector<int32_t> keys = row_keys(cs, spread);
      const int64_t stride = (cs.first + cs.count + 15) / 16 * 16;
      AlignedFloats want, panel_scalar, panel_simd;
      for (AlignedFloats* s : {&want, &panel_scalar, &panel_simd}) {
        s->grow(cs.num_rows * stride);
        std::fill(s->data(), s->data() + cs.num_rows * stride, -1.0f);
      }
      auto rows = [&](AlignedFloats& s) {
        return detail::TileRows{
            .num_rows = cs.num_rows, .keys = keys.data(), .s = s.data(), .s_stride = stride};
      };
      const float scale = 0.125f;
      detail::tile_scores_scalar(block.rows.data(), cs.first, cs.count, cs.hd, q.data(), scale,
                                 rows(want));
      detail::tile_scores_panels_scalar(block.panels.data(), cs.first, cs.count, cs.hd, q.data(),
                                        scale, rows(panel_scalar));
      detail::tile_scores_panels_avx512(block.panels.data(), cs.first, cs.count, cs.hd, q.data(),
                                        scale, rows(panel_simd));
      for (int32_t r = 0; r < cs.num_rows; ++r) {
        const int32_t end = std::min(cs.first + cs.count, keys[r]);
        for (int32_t t = cs.first; t < end; ++t) {
          const std::string what = "hd=" + std::to_string(cs.hd) + " first=" +
                                   std::to_string(cs.first) + " count=" +
                                   std::to_string(cs.count) + " spread=" +
                                   std::to_string(spread) + " r=" + std::to_string(r) +
                                   " t=" + std::to_string(t);
          const float w = want.data()[r * stride + t];
          ASSERT_EQ(0, std::memcmp(&w, &panel_scalar.data()[r * stride + t], 4)) << what;
          ASSERT_EQ(0, std::memcmp(&w, &panel_simd.data()[r * stride + t], 4)) << what;
        }
      }
    }
  }
}

// The tile softmax (rows in groups of 8, their double sums side by side in one register) equals
// the scalar softmax row by row: row counts around the group of 8, rows of different lengths
// (none a multiple of 16), scores spread wide enough that some exponentials underflow.
TEST(AttentionTiledPanels, SoftmaxRowsMatchScalarBitExact) {
  if (!has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (int32_t num_rows : {1, 5, 8, 13, 30}) {
    for (int32_t base : {1, 19, 250, 1021}) {
      for (bool fp16p : {false, true}) {
        for (float spread : {1.0f, 40.0f}) {
          const int64_t stride = (base + num_rows + 3 + 15) / 16 * 16;
          std::vector<int32_t> keys(num_rows);
          for (int32_t r = 0; r < num_rows; ++r) keys[r] = base + (r * 7) % (num_rows + 3);
          const auto scores = testing::random_floats(num_rows * stride, 3 + base, spread);
          AlignedFloats got;
          got.grow(num_rows * stride);
          std::copy(scores.begin(), scores.end(), got.data());
          detail::softmax_rows_avx512(
              {.num_rows = num_rows, .keys = keys.data(), .s = got.data(), .s_stride = stride},
              fp16p);
          for (int32_t r = 0; r < num_rows; ++r) {
            std::vector<float> want(scores.begin() + r * stride,
                                    scores.begin() + r * stride + keys[r]);
            detail::softmax_row_scalar(want.data(), keys[r], fp16p);
            ASSERT_EQ(0, std::memcmp(want.data(), got.data() + r * stride, 4 * want.size()))
                << "rows=" << num_rows << " base=" << base << " r=" << r << " fp16p=" << fp16p
                << " spread=" << spread;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace troupe::gpu::cpu
