// LlamaWeights from small complete GGUF files (one layer, F32): the optional rope_freqs.weight
// (Llama 3.1+ RoPE frequency factors) is exposed when present and refused, by name, when its
// type, length or values are wrong; the llama3 factor formula and the dummy shapes that use it.
#include "model/llama_weights.hpp"

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "model/dummy_weights.hpp"
#include "model/gguf.hpp"
#include "tests/model/gguf_writer.hpp"

namespace troupe::model {
namespace {

using testing::GgufWriter;

constexpr uint32_t kF32 = 0, kF16 = 1;
constexpr uint64_t kEmbd = 32, kFf = 64, kVocab = 3, kHeads = 4;  // head_dim = n_rot = 8

// How to write rope_freqs.weight; nullopt in tiny_weights_file() leaves it out.
struct RopeFreqsTensor {
  std::vector<uint64_t> dims = {4};  // n_rot / 2
  uint32_t type = kF32;
  std::vector<float> values = {1.0f, 2.0f, 4.0f, 8.0f};  // written as F32, or F16 bit patterns
};

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type;
  std::vector<uint8_t> data;
};

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A complete one-layer llama file whose weights are all 0.01 (norms 1.0), plus rope_freqs.
std::filesystem::path tiny_weights_file(const std::string& name,
                                        std::optional<RopeFreqsTensor> rope) {
  std::vector<TensorSpec> t;
  auto add = [&](std::string n, std::vector<uint64_t> dims, float value) {
    uint64_t count = 1;
    for (uint64_t d : dims) count *= d;
    t.push_back({std::move(n), dims, kF32, f32_bytes(std::vector<float>(count, value))});
  };
  add("token_embd.weight", {kEmbd, kVocab}, 0.01f);
  add("output_norm.weight", {kEmbd}, 1.0f);
  add("blk.0.attn_norm.weight", {kEmbd}, 1.0f);
  for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output"})
    add(std::string("blk.0.") + m + ".weight", {kEmbd, kEmbd}, 0.01f);
  add("blk.0.ffn_norm.weight", {kEmbd}, 1.0f);
  add("blk.0.ffn_gate.weight", {kEmbd, kFf}, 0.01f);
  add("blk.0.ffn_up.weight", {kEmbd, kFf}, 0.01f);
  add("blk.0.ffn_down.weight", {kFf, kEmbd}, 0.01f);
  if (rope) {
    std::vector<uint8_t> data = f32_bytes(rope->values);
    if (rope->type == kF16) {  // 1.0 -> 0x3C00 etc.: only the type matters to the loader
      data.assign(rope->values.size() * 2, 0);
      for (size_t i = 0; i < rope->values.size(); ++i) data[2 * i + 1] = 0x3C;
    }
    t.push_back({"rope_freqs.weight", rope->dims, rope->type, data});
  }
  GgufWriter w;
  w.header(t.size(), 6);
  w.kv_string("general.architecture", "llama");
  w.kv_u32("llama.embedding_length", kEmbd);
  w.kv_u32("llama.block_count", 1);
  w.kv_u32("llama.feed_forward_length", kFf);
  w.kv_u32("llama.attention.head_count", kHeads);
  w.kv_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  uint64_t offset = 0;
  for (const TensorSpec& s : t) {
    w.tensor_info(s.name, s.dims, s.type, offset);
    offset += (s.data.size() + 31) / 32 * 32;
  }
  w.align();
  for (const TensorSpec& s : t) {
    w.bytes().insert(w.bytes().end(), s.data.begin(), s.data.end());
    w.align();
  }
  return w.write(name);
}

// Expects loading `path` to throw a GgufError whose message contains every needle.
void expect_refused(const std::filesystem::path& path, std::vector<std::string> needles) {
  const GgufFile file = GgufFile::open(path);
  try {
    (void)LlamaWeights::from_gguf(file);
    ADD_FAILURE() << "expected a GgufError naming rope_freqs.weight";
  } catch (const GgufError& e) {
    for (const std::string& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(LlamaWeightsRopeFreqs, AbsentMeansNoFactors) {
  const auto path = tiny_weights_file("no_rope_freqs", std::nullopt);
  const GgufFile file = GgufFile::open(path);
  const LlamaWeights w = LlamaWeights::from_gguf(file);
  EXPECT_EQ(w.config().n_rot, 8);
  EXPECT_FALSE(w.rope_freqs());
  EXPECT_TRUE(w.rope_freq_factors().empty());
  std::filesystem::remove(path);
}

TEST(LlamaWeightsRopeFreqs, PresentIsExposedAsFactors) {
  const auto path = tiny_weights_file("rope_freqs", RopeFreqsTensor{});
  const GgufFile file = GgufFile::open(path);
  const LlamaWeights w = LlamaWeights::from_gguf(file);
  ASSERT_TRUE(w.rope_freqs());
  EXPECT_EQ(w.rope_freqs()->name, "rope_freqs.weight");
  const auto f = w.rope_freq_factors();
  EXPECT_EQ(std::vector<float>(f.begin(), f.end()), (std::vector<float>{1.0f, 2.0f, 4.0f, 8.0f}));
  std::filesystem::remove(path);
}

TEST(LlamaWeightsRopeFreqs, WrongTypeIsRefusedByName) {
  RopeFreqsTensor r;
  r.type = kF16;
  expect_refused(tiny_weights_file("rope_freqs_f16", r),
                 {"rope_freqs.weight", "expected type F32", "F16"});
}

TEST(LlamaWeightsRopeFreqs, WrongLengthIsRefusedWithExpectedAndActualShape) {
  RopeFreqsTensor full;  // n_rot values instead of n_rot / 2
  full.dims = {8};
  full.values.assign(8, 1.0f);
  expect_refused(tiny_weights_file("rope_freqs_8", full),
                 {"rope_freqs.weight", "expected shape [4]", "file has [8]"});
  RopeFreqsTensor short_one;
  short_one.dims = {3};
  short_one.values.assign(3, 1.0f);
  expect_refused(tiny_weights_file("rope_freqs_3", short_one),
                 {"rope_freqs.weight", "[4]", "file has [3]"});
  RopeFreqsTensor matrix;  // right count per row, but two rows
  matrix.dims = {4, 2};
  matrix.values.assign(8, 1.0f);
  expect_refused(tiny_weights_file("rope_freqs_4x2", matrix),
                 {"rope_freqs.weight", "[4]", "file has [4, 2]"});
}

TEST(LlamaWeightsRopeFreqs, NonPositiveOrNanFactorIsRefused) {
  for (float bad : {0.0f, -1.0f, NAN, INFINITY}) {
    RopeFreqsTensor r;
    r.values[2] = bad;
    expect_refused(tiny_weights_file("rope_freqs_bad", r), {"rope_freqs.weight", "factor [2]"});
  }
}

// Meta's llama3 scaling for Llama 3.2 (factor 32, low 1, high 4, original context 8192) at
// head_dim 64, base 500000: wavelength 2 pi base^(2i/64) below 2048 keeps factor 1, above
// 8192 gets 32, in between the smooth blend. Checked against the converter's formula run in
// float (as its torch float32 tensors do), within float rounding.
TEST(Llama3RopeFactors, FollowMetasDefinition) {
  const Llama3RopeScaling s{32.0f, 1.0f, 4.0f, 8192};
  const std::vector<float> f = llama3_rope_freq_factors(64, 500000.0f, s);
  ASSERT_EQ(f.size(), 32u);
  int ones = 0, full = 0, blended = 0;
  for (int i = 0; i < 32; ++i) {
    const float freq = 1.0f / std::pow(500000.0f, static_cast<float>(2 * i) / 64.0f);
    const float wavelen = 2.0f * static_cast<float>(M_PI) / freq;
    float want;
    if (wavelen < 2048.0f) {
      want = 1.0f, ++ones;
    } else if (wavelen > 8192.0f) {
      want = 32.0f, ++full;
    } else {
      const float smooth = (8192.0f / wavelen - 1.0f) / 3.0f;
      want = 1.0f / ((1.0f - smooth) / 32.0f + smooth), ++blended;
    }
    EXPECT_NEAR(f[i], want, 1e-5f * want) << i;
    if (i > 0) {
      EXPECT_GE(f[i], f[i - 1]) << "factors grow with wavelength";
    }
  }
  EXPECT_GT(ones, 0);
  EXPECT_GT(full, 0);
  EXPECT_GT(blended, 0);
}

TEST(Llama3RopeFactors, DummyLlama32WeightsCarryThem) {
  LlamaConfig c = *LlamaConfig::named_shape("llama-3.2-1b");
  ASSERT_TRUE(c.rope_llama3);
  c.n_layer = 1;  // the factor tensor does not depend on depth; keep the test fast
  c.n_vocab = 256;
  const LlamaWeights w = make_dummy_weights(c, TensorType::kQ4_0, 2);
  ASSERT_TRUE(w.rope_freqs());
  EXPECT_EQ(w.rope_freqs()->name, "rope_freqs.weight");
  const auto f = w.rope_freq_factors();
  const auto want = llama3_rope_freq_factors(c.n_rot, c.rope_freq_base, *c.rope_llama3);
  EXPECT_EQ(std::vector<float>(f.begin(), f.end()), want);
  LlamaConfig smollm = *LlamaConfig::named_shape("smollm2-135m");
  smollm.n_layer = 1;
  const LlamaWeights plain = make_dummy_weights(smollm, TensorType::kQ4_0, 2);
  EXPECT_TRUE(plain.rope_freq_factors().empty());
}

TEST(Llama3RopeFactors, InvalidScalingIsRefused) {
  LlamaConfig c = *LlamaConfig::named_shape("llama-3.2-1b");
  c.rope_llama3->high_freq_factor = 1.0f;  // == low: the blend would divide by zero
  EXPECT_THROW(c.validate(), std::invalid_argument);
}

// Found by tests/fuzz/gguf_fuzz: a float64 rope.freq_base of 1e300 became inf as a float and
// passed the "positive" check; a denormal scaling factor made rope_freq_scale inf.
TEST(LlamaConfigFromGguf, NonFiniteRopeAndNormConstantsAreRefusedByName) {
  struct Case {
    const char* key;
    double value;
    const char* needle;
  };
  for (const Case& c : {Case{"llama.rope.freq_base", 1e300, "rope.freq_base"},
                        Case{"llama.attention.layer_norm_rms_epsilon", 1e300, "rms epsilon"},
                        Case{"llama.rope.scaling.factor", 1e-320, "scaling factor"}}) {
    GgufWriter w;
    const bool scaling = std::string_view(c.key) == "llama.rope.scaling.factor";
    w.header(0, scaling ? 8 : 7);
    w.kv_string("general.architecture", "llama");
    w.kv_u32("llama.embedding_length", kEmbd);
    w.kv_u32("llama.block_count", 1);
    w.kv_u32("llama.feed_forward_length", kFf);
    w.kv_u32("llama.attention.head_count", kHeads);
    w.kv_u32("llama.vocab_size", kVocab);
    if (scaling) w.kv_string("llama.rope.scaling.type", "linear");
    w.put_string(c.key).put<uint32_t>(12).put<double>(c.value);  // a float64 value
    const auto path = w.write("non_finite");
    const GgufFile file = GgufFile::open(path);
    try {
      (void)LlamaConfig::from_gguf(file);
      ADD_FAILURE() << c.key << " = " << c.value << " was accepted";
    } catch (const GgufError& e) {
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
    }
    std::filesystem::remove(path);
  }
}

// Found by tests/fuzz/gguf_fuzz: head_count x key_length past INT32_MAX overflowed q_dim()
// (signed-integer UB) while the weights were checked against the config.
TEST(LlamaConfigFromGguf, AttentionWidthPastInt32IsRefused) {
  GgufWriter w;
  w.header(0, 8);
  w.kv_string("general.architecture", "llama");
  w.kv_u32("llama.embedding_length", kEmbd);
  w.kv_u32("llama.block_count", 1);
  w.kv_u32("llama.feed_forward_length", kFf);
  w.kv_u32("llama.attention.head_count", 8);
  w.kv_u32("llama.attention.key_length", 1u << 30);
  w.kv_u32("llama.rope.dimension_count", 8);
  w.kv_u32("llama.vocab_size", kVocab);
  const auto path = w.write("wide_attention");
  const GgufFile file = GgufFile::open(path);
  try {
    (void)LlamaConfig::from_gguf(file);
    ADD_FAILURE() << "8 heads of 2^30 were accepted";
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("too large"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace troupe::model
