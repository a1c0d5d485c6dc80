// The q8_0 KV cache's kernels (gpu/cpu/attention_q8.hpp) and the Walsh-Hadamard rotation
// (gpu/cpu/hadamard.hpp): every SIMD form bit-identical to its scalar twin (what lets a run on
// any CPU reproduce llama.cpp's x86 bits), the scalar twins against their definitions (ggml's
// x86 quantizer on a hand-checked block with ties, the exact product, a float64 softmax), a tile
// of rows against the same rows one by one, and the sliding window.
#include "gpu/cpu/attention_q8.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/cpu/attention_q8_kernels.hpp"
#include "gpu/cpu/cpu_features.hpp"
#include "gpu/cpu/hadamard.hpp"
#include "model/fp16.hpp"
#include "tests/gpu/cpu_test_util.hpp"

namespace troupe::gpu::cpu {
namespace {

constexpr int32_t kQk = model::quants::kBlockElements;

std::vector<BlockQ8_0> quantized(const float* x, int32_t n, IsaLevel isa) {
  std::vector<BlockQ8_0> out(n / kQk);
  quantize_q8_0(x, n, out.data(), isa);
  return out;
}

// What q8_0 blocks stand for, in double (d * q is exact in float too: 11 x 8 bits).
std::vector<double> dequantized(const BlockQ8_0* b, int32_t n) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    out[i] = static_cast<double>(model::fp16_to_fp32(b[i / kQk].d)) * b[i / kQk].qs[i % kQk];
  }
  return out;
}

// ---- quantize_q8_0 ---------------------------------------------------------------------------

// Blocks that stress the quantizer: random rows at very different scales, a zero block (d = 0,
// no division by zero), a negative maximum, and blocks whose scaled values land exactly on .5
// (amax 127 -> multiplier 1; amax 63.5 -> multiplier 2) so that the rounding mode decides.
std::vector<float> quantizer_row(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> x;
  for (float scale : {1e-3f, 1.0f, 300.0f}) {
    const auto r = testing::random_floats(2 * kQk, rng(), scale);
    x.insert(x.end(), r.begin(), r.end());
  }
  x.insert(x.end(), kQk, 0.0f);
  auto negative = testing::random_floats(kQk, rng(), 2.0f);
  negative[7] = -50.0f;  // the maximum magnitude is negative: q = -127
  x.insert(x.end(), negative.begin(), negative.end());
  std::uniform_int_distribution<int> half_steps(-253, 253);
  for (float amax : {127.0f, 63.5f}) {
    const size_t at = x.size();
    for (int32_t i = 0; i < kQk; ++i) x.push_back(half_steps(rng) * (amax / 254.0f));
    x[at + seed % kQk] = (seed & 1) ? -amax : amax;  // every scaled value k / 2: half are ties
  }
  return x;
}

TEST(Q8_0Quantize, SimdGivesTheScalarBytes) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const auto x = quantizer_row(seed);
    const auto n = static_cast<int32_t>(x.size());
    const auto want = quantized(x.data(), n, IsaLevel::kScalar);
    for (IsaLevel isa : runnable_isas()) {
      const auto got = quantized(x.data(), n, isa);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(BlockQ8_0) * want.size()))
          << to_string(isa) << " seed=" << seed;
    }
  }
}

// ggml's x86 quantize_row_q8_0: d = fp16(amax / 127), q = round-half-even(x * (127 / amax)).
// Its portable reference (roundf, half away from zero, and x * (1 / d)) gives other bytes on the
// ties below (2.5 -> 3), which is why they are spelled out by hand.
TEST(Q8_0Quantize, FollowsGgmlsX86Definition) {
  std::vector<float> x(3 * kQk, 0.0f);  // the third block stays zero
  const float ties[] = {127.0f, 2.5f, 3.5f, -2.5f, -3.5f, 0.5f, -0.5f, 1.5f, -126.5f, 0.25f, 0.75f};
  const int8_t want_ties[] = {127, 2, 4, -2, -4, 0, 0, 2, -126, 0, 1};
  std::copy(std::begin(ties), std::end(ties), x.begin());
  const auto random = testing::random_floats(kQk, 5, 3.0f);
  std::copy(random.begin(), random.end(), x.begin() + kQk);
  for (IsaLevel isa : runnable_isas()) {
    const auto b = quantized(x.data(), 3 * kQk, isa);
    EXPECT_EQ(b[0].d, model::fp32_to_fp16(1.0f)) << to_string(isa);
    for (int32_t i = 0; i < kQk; ++i) {
      const int8_t want = i < static_cast<int32_t>(std::size(want_ties)) ? want_ties[i] : 0;
      EXPECT_EQ(b[0].qs[i], want) << to_string(isa) << " i=" << i;
    }
    float amax = 0.0f;
    for (float v : random) amax = std::max(amax, std::fabs(v));
    EXPECT_EQ(b[1].d, model::fp32_to_fp16(amax / 127.0f)) << to_string(isa);
    for (int32_t i = 0; i < kQk; ++i) {
      EXPECT_EQ(b[1].qs[i], static_cast<int8_t>(std::nearbyint(random[i] * (127.0f / amax))))
          << to_string(isa) << " i=" << i;
    }
    EXPECT_EQ(b[2].d, 0) << to_string(isa);
    for (int8_t q : b[2].qs) EXPECT_EQ(q, 0) << to_string(isa);
  }
}

// ---- dot_q8_0 --------------------------------------------------------------------------------

// Any int8 but -128 (which no quantizer emits) and positive scales of several magnitudes.
std::vector<BlockQ8_0> random_blocks(int32_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> q(-127, 127);
  std::uniform_real_distribution<float> exponent(-12.0f, 2.0f);
  std::vector<BlockQ8_0> out(static_cast<size_t>(n));
  for (auto& b : out) {
    b.d = model::fp32_to_fp16(std::exp2(exponent(rng)));
    for (int8_t& v : b.qs) v = static_cast<int8_t>(q(rng));
  }
  return out;
}

// Float rounding only: the products and 4-value sums are exact integers and d_x * d_y is exact in
// float, so the error is at most ~11 roundings (8 blocks into a lane, 3 levels of the final sum)
// of the magnitude: < 1e-6 of it (random blocks give ~1e-7).
TEST(Q8_0Dot, SimdBitIdenticalToScalarAndNearTheExactProduct) {
  for (int32_t blocks : {1, 2, 8}) {
    for (uint64_t seed = 0; seed < 25; ++seed) {
      const auto x = random_blocks(blocks, 2 * seed + 100 * blocks);
      const auto y = random_blocks(blocks, 2 * seed + 1 + 100 * blocks);
      const float want = dot_q8_0(x.data(), y.data(), blocks, IsaLevel::kScalar);
      for (IsaLevel isa : runnable_isas()) {
        const float got = dot_q8_0(x.data(), y.data(), blocks, isa);
        ASSERT_EQ(0, std::memcmp(&got, &want, 4)) << to_string(isa) << " blocks=" << blocks;
      }
      const auto dx = dequantized(x.data(), blocks * kQk);
      const auto dy = dequantized(y.data(), blocks * kQk);
      double exact = 0.0, magnitude = 0.0;
      for (size_t i = 0; i < dx.size(); ++i) {
        exact += dx[i] * dy[i];
        magnitude += std::fabs(dx[i] * dy[i]);
      }
      EXPECT_NEAR(want, exact, 1e-6 * magnitude) << "blocks=" << blocks << " seed=" << seed;
    }
  }
}

// ---- attention_q8_0 --------------------------------------------------------------------------

// A q8_0 layer over our own buffers with the sequence's blocks scattered (a shuffled table, the
// unused blocks full of junk), and the floats each position was stored from: the reference reads
// those by position, never through the table, so a wrong walk of the table shows.
struct Q8Cache {
  static constexpr int32_t kBlockSize = 16;
  std::vector<uint16_t> k_words, v_words;
  KvLayerView view;
  std::vector<int32_t> table;
  std::vector<float> k, v;  // [position][kv head][head_dim]

  Q8Cache(int32_t num_keys, int32_t num_kv_heads, int32_t head_dim, uint64_t seed) {
    const int32_t used = (num_keys + kBlockSize - 1) / kBlockSize;
    view = {.num_blocks = used + 4,
            .block_size = kBlockSize,
            .num_kv_heads = num_kv_heads,
            .head_dim = head_dim,
            .dtype = KvDtype::kQ8_0};
    const size_t words = view.num_blocks * view.block_elements();
    k_words.assign(words, 0x5555);  // junk: d = 85.3, q = 85
    v_words.assign(words, 0x5555);
    view.k = k_words.data();
    view.v = v_words.data();
    table.resize(view.num_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(seed));
    table.resize(used);
    const size_t row = static_cast<size_t>(num_kv_heads) * head_dim;
    k = testing::random_floats(num_keys * row, seed + 1);
    v = testing::random_floats(num_keys * row, seed + 2);
    for (int32_t t = 0; t < num_keys; ++t) {
      kv_store_q8_0(view, table[t / kBlockSize], t % kBlockSize, k.data() + t * row,
                    v.data() + t * row);
    }
  }
  Q8Cache(const Q8Cache&) = delete;  // view points into the vectors
  Q8Cache& operator=(const Q8Cache&) = delete;
};

struct Call {
  int32_t first_position = 0;
  int32_t num_rows = 1;
  int32_t window = 0;
  int32_t num_heads = 1;
  int32_t kv_head = 0;
};

// Runs `call`, its row r taking row first_row + r of q ([row][head][head_dim]). Query and output
// rows lie padded apart (strides that differ from the packed size and from each other); the
// query padding is NaN (reading it would poison the output) and the output padding must stay
// untouched. Returns the outputs packed as q is.
std::vector<float> run(const Q8Cache& c, const std::vector<float>& q, int32_t first_row,
                       const Call& call, IsaLevel isa, Q8AttentionScratch& scratch) {
  const int32_t hd = c.view.head_dim;
  const int64_t packed = static_cast<int64_t>(call.num_heads) * hd;
  const int64_t q_stride = packed + 32, out_stride = packed + 16;
  std::vector<float> q_rows(call.num_rows * q_stride, NAN), out(call.num_rows * out_stride, -7.0f);
  for (int32_t r = 0; r < call.num_rows; ++r) {
    std::copy_n(q.data() + (first_row + r) * packed, packed, q_rows.data() + r * q_stride);
  }
  const Q8AttentionRows rows{.first_position = call.first_position,
                             .num_rows = call.num_rows,
                             .window = call.window,
                             .num_heads = call.num_heads,
                             .q = q_rows.data(),
                             .q_stride = q_stride,
                             .out = out.data(),
                             .out_stride = out_stride,
                             .scale = 1.0f / std::sqrt(static_cast<float>(hd))};
  attention_q8_0(c.view, c.table.data(), call.kv_head, rows, scratch, isa);
  std::vector<float> result;
  bool padding_kept = true;
  for (int32_t r = 0; r < call.num_rows; ++r) {
    const float* o = out.data() + r * out_stride;
    result.insert(result.end(), o, o + packed);
    padding_kept &= std::all_of(o + packed, o + out_stride, [](float f) { return f == -7.0f; });
  }
  EXPECT_TRUE(padding_kept) << "wrote between output rows";
  return result;
}

// Softmax attention in double for the query q (one head) at position p over keys [first, p]: the
// query as the kernel quantizes it (the scalar quantizer, checked above), K and V as stored.
std::vector<double> reference(const Q8Cache& c, const float* q, int32_t kv_head, int32_t first,
                              int32_t p) {
  const int32_t hd = c.view.head_dim;
  const double scale = 1.0f / std::sqrt(static_cast<float>(hd));
  auto as_stored = [&](const float* row) {
    return dequantized(quantized(row, hd, IsaLevel::kScalar).data(), hd);
  };
  auto stored = [&](const std::vector<float>& x, int32_t t) {
    return as_stored(x.data() + (static_cast<int64_t>(t) * c.view.num_kv_heads + kv_head) * hd);
  };
  const auto qd = as_stored(q);
  std::vector<double> s;
  for (int32_t t = first; t <= p; ++t) {
    const auto kd = stored(c.k, t);
    s.push_back(scale * std::inner_product(qd.begin(), qd.end(), kd.begin(), 0.0));
  }
  const double m = *std::max_element(s.begin(), s.end());
  std::vector<double> out(hd, 0.0);
  double sum = 0.0;
  for (int32_t t = first; t <= p; ++t) {
    const double w = std::exp(s[t - first] - m);
    const auto vd = stored(c.v, t);
    for (int32_t d = 0; d < hd; ++d) out[d] += w * vd[d];
    sum += w;
  }
  for (double& o : out) o /= sum;
  return out;
}

// Every row and head of `got` (from `call`, queries q from row 0) within `tolerance` of the
// reference (stops at the first value outside).
void check_against_reference(const Q8Cache& c, const std::vector<float>& q, const Call& call,
                             const std::vector<float>& got, double tolerance) {
  const int32_t hd = c.view.head_dim;
  for (int32_t r = 0; r < call.num_rows; ++r) {
    const int32_t p = call.first_position + r;
    const int32_t first = call.window > 0 ? std::max(0, p + 1 - call.window) : 0;
    for (int32_t h = 0; h < call.num_heads; ++h) {
      const size_t at = (static_cast<size_t>(r) * call.num_heads + h) * hd;
      const auto want = reference(c, q.data() + at, call.kv_head, first, p);
      for (int32_t d = 0; d < hd; ++d) {
        ASSERT_NEAR(got[at + d], want[d], tolerance) << "p=" << p << " h=" << h << " d=" << d;
      }
    }
  }
}

std::string describe(IsaLevel isa, int32_t hd, const Call& call) {
  return std::string(to_string(isa)) + " hd=" + std::to_string(hd) +
         " heads=" + std::to_string(call.num_heads) +
         " first=" + std::to_string(call.first_position) +
         " rows=" + std::to_string(call.num_rows) + " window=" + std::to_string(call.window);
}

// ---- the online softmax kernel ------------------------------------------------------------

// Score chunks that stress the running maximum: a new maximum at every key, ties with it (of
// both signs of zero), -inf scores and a -inf start, a maximum in the last lane of a 16-key
// half, and a NaN (the kernels must then give the twin's NaNs, not a maximum's).
std::vector<std::vector<float>> crafted_chunks() {
  std::vector<std::vector<float>> chunks;
  std::vector<float> rising(32);
  for (int32_t i = 0; i < 32; ++i) rising[i] = -3.0f + 0.25f * static_cast<float>(i);
  chunks.push_back(rising);
  chunks.push_back({0.0f, -0.0f, 0.0f, -1.0f, -0.0f, 2.0f, 2.0f, 1.0f, 2.0f});
  chunks.push_back({-INFINITY, -INFINITY, 1.0f, -INFINITY, 3.0f, 3.0f});
  auto random = testing::random_floats(32, 91, 4.0f);
  random[15] = 40.0f;  // the first half's last lane
  chunks.push_back(random);
  random[15] = -1.0f;
  random[16] = 41.0f;  // the second half's first lane
  chunks.push_back(random);
  auto poisoned = testing::random_floats(20, 92, 4.0f);
  poisoned[9] = NAN;
  chunks.push_back(poisoned);
  return chunks;
}

// Every kernel set's softmax gives the twin's factors, flags and state bits over consecutive
// chunks of every length (1 to 32 keys), from a -inf start and from a finite state.
TEST(Q8_0Softmax, EveryIsaGivesTheTwinsBitsOnCraftedScores) {
  using detail::kQ8KeyChunk;
  constexpr int32_t kItems = 3;
  const auto chunks = crafted_chunks();
  for (IsaLevel isa : runnable_isas()) {
    const detail::Q8Kernels& k = detail::q8_kernels(isa);
    for (float start : {-INFINITY, 1.5f}) {
      for (size_t c = 0; c < chunks.size(); ++c) {
        const int32_t size = static_cast<int32_t>(chunks[c].size());
        for (int32_t n = 1; n <= size; ++n) {
          // Item i sees the chunk's scores shifted by i (the items' maxima differ).
          std::vector<float> s(kItems * kQ8KeyChunk, 0.0f);
          for (int32_t item = 0; item < kItems; ++item) {
            for (int32_t i = 0; i < n; ++i) s[item * kQ8KeyChunk + i] = chunks[c][i] + item;
          }
          auto run = [&](const detail::Q8Kernels& kernels, std::vector<float>& state,
                         std::vector<float>& ms, std::vector<float>& vs, bool* rescaled) {
            float* states[kItems];
            for (int32_t item = 0; item < kItems; ++item) states[item] = &state[2 * item];
            // Twice: the second call starts from the first's maximum and sum.
            kernels.softmax(states, kItems, s.data(), n, ms.data(), vs.data(), rescaled);
            kernels.softmax(states, kItems, s.data(), n, ms.data(), vs.data(), rescaled);
          };
          std::vector<float> state0(2 * kItems), state1(2 * kItems);
          for (int32_t item = 0; item < kItems; ++item) {
            state0[2 * item] = state1[2 * item] = start;
            state0[2 * item + 1] = state1[2 * item + 1] = start == -INFINITY ? 0.0f : 2.0f;
          }
          std::vector<float> ms0(kItems * kQ8KeyChunk), vs0(ms0.size());
          std::vector<float> ms1(ms0.size()), vs1(ms0.size());
          bool rescaled0[kItems], rescaled1[kItems];
          run(detail::q8_scalar_kernels(), state0, ms0, vs0, rescaled0);
          run(k, state1, ms1, vs1, rescaled1);
          const std::string where = std::string(to_string(isa)) + " chunk " + std::to_string(c) +
                                    " n=" + std::to_string(n) + " start " + std::to_string(start);
          for (int32_t item = 0; item < kItems; ++item) {
            for (int32_t i = 0; i < n; ++i) {
              const int32_t at = item * kQ8KeyChunk + i;
              ASSERT_EQ(std::bit_cast<uint32_t>(ms0[at]), std::bit_cast<uint32_t>(ms1[at]))
                  << where << " ms item " << item << " key " << i;
              ASSERT_EQ(std::bit_cast<uint32_t>(vs0[at]), std::bit_cast<uint32_t>(vs1[at]))
                  << where << " vs item " << item << " key " << i;
            }
            ASSERT_EQ(rescaled0[item], rescaled1[item]) << where << " item " << item;
            // The maximum may differ only in the sign of a zero (see softmax_avx512).
            ASSERT_TRUE(state0[2 * item] == state1[2 * item] ||
                        (std::isnan(state0[2 * item]) && std::isnan(state1[2 * item])))
                << where << " maximum of item " << item;
            ASSERT_EQ(std::bit_cast<uint32_t>(state0[2 * item + 1]),
                      std::bit_cast<uint32_t>(state1[2 * item + 1]))
                << where << " sum of item " << item;
          }
        }
      }
    }
  }
}

// Positions around the 16-key blocks and the kernel's 32-key chunks, single rows and tiles.
TEST(Q8_0Attention, SimdBitIdenticalToScalar) {
  for (int32_t hd : {64, 256}) {
    const Q8Cache c(80, 2, hd, 7 + hd);
    for (int32_t heads : {1, 3}) {
      const auto q = testing::random_floats(45 * heads * hd, 11, 2.0f);
      std::vector<Call> calls;
      for (int32_t p : {0, 15, 16, 31, 32, 33, 79}) calls.push_back({p, 1, 0, heads, 1});
      calls.push_back({3, 45, 0, heads, 1});
      calls.push_back({30, 45, 20, heads, 0});
      for (const Call& call : calls) {
        Q8AttentionScratch s0;
        const auto want = run(c, q, 0, call, IsaLevel::kScalar, s0);
        for (IsaLevel isa : runnable_isas()) {
          Q8AttentionScratch s1;
          const auto got = run(c, q, 0, call, isa, s1);
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), 4 * got.size()))
              << describe(isa, hd, call);
        }
      }
    }
  }
}

// Rows tiled in one call share K/V loads but keep their own order: the bits of the same rows run
// one at a time. Tiles cross chunk boundaries, start at 0 and deeper, with and without a window
// (rows of one tile then see different first keys). The scratch is reused across shapes.
TEST(Q8_0Attention, TileEqualsRowsOneByOneBitExact) {
  const int32_t hd = 64, heads = 3;
  const Q8Cache c(100, 2, hd, 21);
  const auto q = testing::random_floats(64 * heads * hd, 22, 2.0f);
  Q8AttentionScratch scratch;
  for (IsaLevel isa : runnable_isas()) {
    for (const Call& tile : {Call{0, 37, 0, heads, 1}, Call{29, 64, 0, heads, 0},
                             Call{29, 64, 9, heads, 1}, Call{60, 40, 33, heads, 1}}) {
      const auto together = run(c, q, 0, tile, isa, scratch);
      for (int32_t r = 0; r < tile.num_rows; ++r) {
        Call one = tile;
        one.first_position += r;
        one.num_rows = 1;
        const auto alone = run(c, q, r, one, isa, scratch);
        const float* tiled = together.data() + r * heads * hd;
        ASSERT_EQ(0, std::memcmp(tiled, alone.data(), 4 * alone.size()))
            << describe(isa, hd, tile) << " row=" << r;
      }
    }
  }
}

// Float32 scores and sums against double: under 3e-6 on outputs of magnitude ~1. Dropping the 1/S
// normalization multiplies outputs by S > 1, and one key more or fewer moves them by its
// probability (>= ~1e-3 here): both far outside.
constexpr double kTolerance = 2e-5;

TEST(Q8_0Attention, MatchesDoubleSoftmaxOfTheQuantizedValues) {
  for (int32_t hd : {64, 128}) {
    const Q8Cache c(300, 2, hd, 31 + hd);
    const int32_t heads = 3;
    const auto q = testing::random_floats(300 * heads * hd, 32, 2.0f);
    Q8AttentionScratch scratch;
    for (IsaLevel isa : runnable_isas()) {
      for (int32_t p : {1, 2, 31, 33, 100, 299}) {
        // the query of position p is the first row of q here
        const Call call{p, 1, 0, heads, 1};
        check_against_reference(c, q, call, run(c, q, 0, call, isa, scratch), kTolerance);
      }
      const Call tile{250, 50, 0, heads, 0};
      check_against_reference(c, q, tile, run(c, q, 0, tile, isa, scratch), kTolerance);
    }
  }
}

// A window sees keys (p - window, p] only: against the reference over those keys, for single
// rows and for a tile, and far from the reference over all keys (the window is not a no-op). A
// window of 1 leaves the last key alone: its dequantized V row exactly (S = 1).
TEST(Q8_0Attention, SlidingWindowSeesOnlyTheLastKeys) {
  const int32_t hd = 64, heads = 2;
  const Q8Cache c(120, 1, hd, 41);
  const auto q = testing::random_floats(60 * heads * hd, 42, 2.0f);
  Q8AttentionScratch scratch;
  for (IsaLevel isa : runnable_isas()) {
    for (int32_t window : {2, 5, 40, 119}) {
      for (const Call& call : {Call{119, 1, window, heads, 0}, Call{60, 60, window, heads, 0}}) {
        const auto got = run(c, q, 0, call, isa, scratch);
        check_against_reference(c, q, call, got, kTolerance);
        if (window > 40) continue;
        double apart = 0.0;  // from the unwindowed result of row 0
        for (int32_t h = 0; h < heads; ++h) {
          const auto all = reference(c, q.data() + h * hd, 0, 0, call.first_position);
          for (int32_t d = 0; d < hd; ++d)
            apart = std::max(apart, std::fabs(got[h * hd + d] - all[d]));
        }
        EXPECT_GT(apart, 100 * kTolerance) << describe(isa, hd, call);
      }
    }
    const Call last{77, 1, 1, heads, 0};
    const auto got = run(c, q, 0, last, isa, scratch);
    const auto* v = reinterpret_cast<const BlockQ8_0*>(
        c.view.v + c.view.offset(c.table[77 / Q8Cache::kBlockSize], 0, 77 % Q8Cache::kBlockSize));
    const auto want = dequantized(v, hd);
    for (int32_t h = 0; h < heads; ++h) {
      for (int32_t d = 0; d < hd; ++d) ASSERT_EQ(got[h * hd + d], want[d]) << to_string(isa);
    }
  }
}

// ---- hadamard_rotate -------------------------------------------------------------------------

// The dense orthonormal Sylvester matrix H[i][j] = (-1)^popcount(i & j) / sqrt(n), block by
// block; H is symmetric and orthonormal, so a second rotation gives the input back.
TEST(Hadamard, EqualsTheDenseSylvesterMatrixAndIsItsOwnInverse) {
  for (int32_t n : {64, 128, 256}) {
    const int32_t blocks = 3;
    const auto x = testing::random_floats(static_cast<size_t>(blocks) * n, n, 3.0f);
    auto got = x;
    hadamard_rotate(got.data(), static_cast<int64_t>(got.size()), n);
    const double norm = 1.0 / std::sqrt(static_cast<double>(n));
    for (int32_t b = 0; b < blocks; ++b) {
      for (int32_t i = 0; i < n; ++i) {
        double want = 0.0;
        for (int32_t j = 0; j < n; ++j) {
          const double h = (std::popcount(static_cast<uint32_t>(i & j)) & 1) ? -norm : norm;
          want += h * x[b * n + j];
        }
        ASSERT_NEAR(got[b * n + i], want, 1e-5) << "n=" << n << " block=" << b << " i=" << i;
      }
    }
    hadamard_rotate(got.data(), static_cast<int64_t>(got.size()), n);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(got[i], x[i], 1e-5) << "n=" << n << " twice, i=" << i;
    }
  }
}

// Every isa's butterflies give the scalar twin's bits, at every block size the forward uses.
TEST(Hadamard, SimdBitIdenticalToScalar) {
  for (int32_t n : {16, 32, 64, 128, 256}) {
    const auto x = testing::random_floats(static_cast<size_t>(5) * n, 77 + n, 3.0f);
    auto want = x;
    hadamard_rotate(want.data(), static_cast<int64_t>(want.size()), n, IsaLevel::kScalar);
    for (IsaLevel isa : runnable_isas()) {
      auto got = x;
      hadamard_rotate(got.data(), static_cast<int64_t>(got.size()), n, isa);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), 4 * got.size()))
          << to_string(isa) << " n=" << n;
    }
  }
}

// The largest power of two >= 64 dividing head_dim; 0 when 64 does not divide it.
TEST(Hadamard, RotationBlockOfHeadDim) {
  EXPECT_EQ(kv_rotation_block(64), 64);
  EXPECT_EQ(kv_rotation_block(128), 128);
  EXPECT_EQ(kv_rotation_block(256), 256);
  EXPECT_EQ(kv_rotation_block(96), 0);
  EXPECT_EQ(kv_rotation_block(192), 64);
  EXPECT_EQ(kv_rotation_block(320), 64);
  EXPECT_EQ(kv_rotation_block(32), 0);
  EXPECT_EQ(kv_rotation_block(0), 0);
}

}  // namespace
}  // namespace troupe::gpu::cpu
