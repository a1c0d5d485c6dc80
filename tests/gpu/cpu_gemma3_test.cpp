// Gemma 3 270M (Q4_K_M, scripts/fetch_model gemma3-270m) on the CPU backend against llama.cpp
// (tests/reference/gemma3_*.json, made by tests/reference/make_gemma3_reference.py with weight
// repacking and flash attention off): the config read from the file, the tokenizer on a
// 300-string corpus, Gemma's chat format, the first step's logits (with the f16 and the q8_0 KV
// cache), and 22 prompts x 48 greedy tokens (two past the 512-token sliding window) decoded
// together. Skips when the model file is
// absent ($TROUPE_GEMMA3_MODEL or models/gemma-3-270m-q4_k_m.gguf; scripts/test fetches it).
#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpu/cpu/cpu_backend.hpp"
#include "model/chat_template.hpp"
#include "model/dummy_weights.hpp"
#include "model/gguf.hpp"
#include "model/llama_config.hpp"
#include "model/tokenizer.hpp"
#include "tests/gpu/cpu_step_harness.hpp"
#include "tests/gpu/greedy_reference.hpp"
#include "tests/support/source_dir.hpp"

namespace troupe::gpu::cpu {
namespace {

using testing::StepHarness;

std::filesystem::path gemma3_path() {
  if (const char* env = std::getenv("TROUPE_GEMMA3_MODEL"); env != nullptr && *env != '\0') {
    return env;
  }
  return test_support::source_dir() / "models" / "gemma-3-270m-q4_k_m.gguf";
}

std::filesystem::path reference_path(const char* name) {
  return test_support::source_dir() / "tests" / "reference" / name;
}

std::vector<int32_t> read_ids(simdjson::dom::array a) {
  std::vector<int32_t> out;
  for (int64_t v : a) out.push_back(static_cast<int32_t>(v));
  return out;
}

std::string from_hex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

class Gemma3 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(gemma3_path())) return;
    file_ = std::make_shared<const model::GgufFile>(model::GgufFile::open(gemma3_path()));
    tokenizer_ = std::make_unique<model::Tokenizer>(model::Tokenizer::from_gguf(*file_));
  }
  static void TearDownTestSuite() {
    tokenizer_.reset();
    file_.reset();
  }
  void SetUp() override {
    if (file_ == nullptr) {
      GTEST_SKIP() << "no " << gemma3_path() << " (TROUPE_MODELS=gemma3-270m ./scripts/setup)";
    }
  }
  static std::unique_ptr<CpuBackend> backend(int32_t num_blocks) {
    CpuBackendConfig cfg;
    cfg.num_blocks = num_blocks;
    return CpuBackend::from_gguf(file_, cfg);
  }
  static inline std::shared_ptr<const model::GgufFile> file_;
  static inline std::unique_ptr<model::Tokenizer> tokenizer_;
};

TEST_F(Gemma3, ConfigFromTheFile) {
  const model::LlamaConfig c = model::LlamaConfig::from_gguf(*file_);
  EXPECT_EQ(c.architecture, "gemma3");
  EXPECT_EQ(c.n_layer, 18);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_head_kv, 1);
  EXPECT_EQ(c.rope_mode, model::RopeMode::kNeox);
  EXPECT_TRUE(c.qk_norm && c.post_norms && c.scale_queries && c.tied_output);
  EXPECT_EQ(c.ffn_activation, model::FfnActivation::kGeluTanh);
  EXPECT_FLOAT_EQ(c.embedding_scale, std::sqrt(640.0f));
  EXPECT_FLOAT_EQ(c.attention_scale(), 1.0f);
  EXPECT_FLOAT_EQ(c.query_scale(), 1.0f / 16.0f);
  EXPECT_EQ(c.sliding_window, 512);
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const bool global = l % 6 == 5;  // layers 5, 11, 17
    EXPECT_EQ(c.is_sliding(l), !global) << "layer " << l;
    EXPECT_FLOAT_EQ(c.rope_base(l), global ? 1e6f : 1e4f) << "layer " << l;
  }
  EXPECT_EQ(c.first_visible_key(0, 511), 0);
  EXPECT_EQ(c.first_visible_key(0, 512), 1);   // keys (512 - 512, 512]
  EXPECT_EQ(c.first_visible_key(5, 4000), 0);  // a global layer sees everything
}

TEST_F(Gemma3, TokenizerMatchesLlamaCppOnTheCorpus) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(reference_path("gemma3_tokenize.json").string());
  int checked = 0;
  for (simdjson::dom::element e : doc["entries"].get_array()) {
    const std::string text = from_hex(std::string_view(e["hex"]));
    EXPECT_EQ(tokenizer_->encode(text, /*parse_special=*/true), read_ids(e["special"]))
        << "special on: '" << text << "'";
    const std::vector<int32_t> plain = read_ids(e["plain"]);
    EXPECT_EQ(tokenizer_->encode(text, /*parse_special=*/false), plain)
        << "special off: '" << text << "'";
    EXPECT_EQ(tokenizer_->decode(plain), from_hex(std::string_view(e["plain_detok_hex"])))
        << "decode: '" << text << "'";
    ++checked;
  }
  EXPECT_GE(checked, 300);
  for (int64_t id : doc["info"]["eog_ids"].get_array()) {
    EXPECT_TRUE(tokenizer_->is_end_of_generation(static_cast<int32_t>(id))) << id;
  }
}

// The file has no chat template: troupe uses Gemma's format (llama.cpp's built-in rendering),
// and the reference's chat prompts were rendered and encoded the same way.
TEST_F(Gemma3, ChatPromptsEncodeAsTheReference) {
  const model::ChatTemplate tmpl = model::ChatTemplate::for_model(*file_);
  EXPECT_EQ(tmpl.kind(), model::ChatTemplateKind::kGemma);
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(reference_path("gemma3_greedy.json").string());
  int chats = 0;
  for (simdjson::dom::element p : doc["prompts"].get_array()) {
    if (std::string_view(p["kind"]) != "chat") continue;
    std::vector<model::ChatMessage> messages;
    for (simdjson::dom::element m : p["messages"].get_array()) {
      messages.push_back({.role = std::string(std::string_view(m["role"])),
                          .content = std::string(std::string_view(m["content"]))});
    }
    EXPECT_EQ(tmpl.apply(messages, true), std::string_view(p["text"]));
    EXPECT_EQ(model::encode_chat(*tokenizer_, tmpl, messages, true), read_ids(p["prompt_ids"]));
    ++chats;
  }
  EXPECT_GE(chats, 16);
}

using Prompt = testing::GreedyPrompt;

std::vector<Prompt> greedy_reference() {
  return testing::read_greedy_reference(reference_path("gemma3_greedy.json"));
}

// The first step's logits for prompt `index` of the reference agree with llama.cpp's top-5 within
// 5e-5 (the reference stores them rounded to 4 decimals).
void expect_first_step_logits(CpuBackend& b, const Prompt& prompt, size_t index) {
  StepHarness h(512, 16);
  h.set_kv_groups(b.kv_geometry().num_kv_groups, b.kv_geometry().sliding_window);
  h.add(1, prompt.ids);
  const auto logits = b.compute_logits(h.build({{1, static_cast<int32_t>(prompt.ids.size())}}));
  ASSERT_EQ(logits.size(), static_cast<size_t>(b.model_config().n_vocab));
  for (const auto& [id, value] : prompt.top[0]) {
    EXPECT_NEAR(logits[static_cast<size_t>(id)], value, 5e-5) << "prompt " << index << " id " << id;
  }
}

// The K-quant (Q4_K, Q6_K), Q5_0 and Q8_0 products and the Gemma graph give llama.cpp's logits to
// the bit: a chat prompt (16 tokens: K-quants in the tiled order) and a raw one (6 tokens: the
// vec_dot order).
TEST_F(Gemma3, FirstStepLogitsEqualLlamaCpp) {
  const std::vector<Prompt> prompts = greedy_reference();
  ASSERT_GE(prompts.size(), 22u);
  auto b = backend(512);
  for (size_t i : {size_t{0}, size_t{15}}) expect_first_step_logits(*b, prompts[i], i);
}

// The same past the 512-token window (789 tokens: the sliding layers' masks cut). SLOW: a minute
// under ASan, where the small-window dummy below runs the masks instead.
TEST_F(Gemma3, FirstStepLogitsPastTheWindowEqualLlamaCpp) {
  const std::vector<Prompt> prompts = greedy_reference();
  ASSERT_GE(prompts.size(), 22u);
  auto b = backend(512);
  const size_t i = prompts.size() - 2;
  ASSERT_GT(prompts[i].ids.size(), 512u);
  expect_first_step_logits(*b, prompts[i], i);
}

// With a q8_0 KV cache (Q/K rotated in blocks of 256, V and the output in blocks of 64; the
// sliding layers' masks in the flash-attention walk): llama.cpp's -ctk q8_0 -ctv q8_0 -fa on
// first-step logits (tests/reference/gemma3_kv_q8_first_step.json), top-8 within its rounding.
void expect_kv_q8_first_step(const std::shared_ptr<const model::GgufFile>& file, size_t which) {
  simdjson::dom::parser parser;
  const simdjson::dom::element doc =
      parser.load(reference_path("gemma3_kv_q8_first_step.json").string());
  const simdjson::dom::element prompt = doc["prompts"].at(which);
  const std::vector<int32_t> ids = read_ids(prompt["prompt_ids"]);
  CpuBackendConfig cfg;
  cfg.num_blocks = 512;
  cfg.kv_dtype = KvDtype::kQ8_0;
  auto b = CpuBackend::from_gguf(file, cfg);
  StepHarness h(512, 16);
  h.set_kv_groups(b->kv_geometry().num_kv_groups, b->kv_geometry().sliding_window);
  h.add(1, ids);
  const auto logits = b->compute_logits(h.build({{1, static_cast<int32_t>(ids.size())}}));
  for (simdjson::dom::element pair : prompt["top"].get_array()) {
    const auto id = static_cast<size_t>(int64_t(pair.at(0)));
    EXPECT_NEAR(logits[id], double(pair.at(1)), 5e-5) << "prompt " << which << " id " << id;
  }
}

TEST_F(Gemma3, KvQ8FirstStepLogitsEqualLlamaCpp) {
  expect_kv_q8_first_step(file_, 0);  // a chat
  expect_kv_q8_first_step(file_, 1);  // 6 raw tokens
}

// The 789-token prompt past the window. SLOW: a minute under ASan.
TEST_F(Gemma3, KvQ8FirstStepPastTheWindowEqualsLlamaCpp) { expect_kv_q8_first_step(file_, 2); }

// All 22 prompts decoded together (continuous batching's shape) give llama.cpp's sequential
// greedy tokens, 48 each, with the sliding groups' out-of-window pages freed after every step
// and handed to the next allocation (StepHarness, as the KV-cache manager does): the two prompts
// past the 512-token window decode on recycled pages. A divergence names llama.cpp's top-2 gap
// at that step.
TEST_F(Gemma3, MatchesLlamaCppGreedyReference) {
  const std::vector<Prompt> prompts = greedy_reference();
  ASSERT_GE(prompts.size(), 22u);
  auto b = backend(2048);
  const KvCacheGeometry geometry = b->kv_geometry();
  ASSERT_EQ(geometry.num_kv_groups, 6);  // layers 5, 11, 17; then five groups of 3 sliding layers
  ASSERT_EQ(geometry.sliding_window, 512);
  StepHarness h(2048, 16);
  h.set_kv_groups(geometry.num_kv_groups, geometry.sliding_window);
  const int identical = testing::decode_together_and_compare(
      h, prompts, [&](const StepBatch& batch) { return b->run_step(batch); });
  const size_t n_gen = prompts[0].generated.size();
  std::printf("gemma3: %d of %zu prompts identical over %zu greedy tokens; %d pages held at the "
              "end (%d without freeing)\n",
              identical, prompts.size(), n_gen, h.pages_in_use(), h.pages_taken());
  // The two long prompts' sliding pages below their windows went back (at the end, with 837 and
  // 776 tokens in KV: 20 and 16 pages in each of 5 sliding groups).
  EXPECT_EQ(h.pages_taken() - h.pages_in_use(), 5 * (20 + 16));
}

// The named dummy shape (no file needed: what a GPU session without the model runs) is the real
// file's config.
TEST(Gemma3Dummy, ShapeIsTheFilesConfig) {
  const std::optional<model::LlamaConfig> shape = model::LlamaConfig::named_shape("gemma3-270m");
  ASSERT_TRUE(shape.has_value());
  if (!std::filesystem::exists(gemma3_path())) GTEST_SKIP() << "no " << gemma3_path();
  const model::LlamaConfig c = model::LlamaConfig::from_gguf(model::GgufFile::open(gemma3_path()));
  EXPECT_EQ(shape->n_vocab, c.n_vocab);
  EXPECT_EQ(shape->n_embd, c.n_embd);
  EXPECT_EQ(shape->n_ff, c.n_ff);
  EXPECT_EQ(shape->head_dim, c.head_dim);
  EXPECT_EQ(shape->n_head, c.n_head);
  EXPECT_EQ(shape->n_head_kv, c.n_head_kv);
  EXPECT_EQ(shape->context_length, c.context_length);
  EXPECT_EQ(shape->sliding_layers, c.sliding_layers);
  EXPECT_EQ(shape->sliding_window, c.sliding_window);
  EXPECT_FLOAT_EQ(shape->rms_eps, c.rms_eps);
  EXPECT_FLOAT_EQ(shape->embedding_scale, c.embedding_scale);
  EXPECT_FLOAT_EQ(shape->rope_freq_base, c.rope_freq_base);
  EXPECT_FLOAT_EQ(shape->rope_freq_base_sliding, c.rope_freq_base_sliding);
}

// A Gemma-shaped backend with KV groups gives a sequence the same tokens alone and batched, across
// the sliding window, with out-of-window pages recycled: a long prompt of window + 18 tokens and
// a short one, prefilled together or apart, then 3 decode steps.
void expect_batching_keeps_the_bits(const model::LlamaConfig& config) {
  CpuBackendConfig cfg;
  cfg.num_blocks = 512;
  CpuBackend backend(model::make_dummy_weights(config, model::TensorType::kQ4_K, 7), cfg);
  const KvCacheGeometry g = backend.kv_geometry();
  EXPECT_EQ(g.num_kv_groups, 6);
  EXPECT_EQ(g.sliding_window, config.sliding_window);
  const int32_t long_len = config.sliding_window + 18;
  const int32_t short_len = 40;
  std::vector<int32_t> long_prompt(static_cast<size_t>(long_len));
  std::vector<int32_t> short_prompt(static_cast<size_t>(short_len));
  for (size_t i = 0; i < long_prompt.size(); ++i) {
    long_prompt[i] = static_cast<int32_t>((1000 + 7 * i) % static_cast<size_t>(config.n_vocab));
  }
  for (size_t i = 0; i < short_prompt.size(); ++i) {
    short_prompt[i] = static_cast<int32_t>((50000 + 3 * i) % static_cast<size_t>(config.n_vocab));
  }
  auto run = [&](bool together) {
    StepHarness h(512, 16);
    h.set_kv_groups(g.num_kv_groups, g.sliding_window);
    h.add(1, long_prompt);
    h.add(2, short_prompt);
    using Work = std::vector<std::pair<uint64_t, int32_t>>;
    const std::vector<Work> prefills = together
                                           ? std::vector<Work>{{{1, long_len}, {2, short_len}}}
                                           : std::vector<Work>{{{1, long_len}}, {{2, short_len}}};
    for (const Work& work : prefills) h.accept(backend.run_step(h.build(work)));
    for (int step = 0; step < 3; ++step) h.accept(backend.run_step(h.build({{1, 1}, {2, 1}})));
    return std::pair{h.seq(1).tokens, h.seq(2).tokens};
  };
  EXPECT_EQ(run(true), run(false));
}

// At the named shape (window 512). SLOW: over a minute under ASan.
TEST(Gemma3Dummy, BatchingKeepsTheBitsAtTheNamedShape) {
  expect_batching_keeps_the_bits(*model::LlamaConfig::named_shape("gemma3-270m"));
}

// The same graph with a 64-token window and an 8k vocabulary: every sliding-window path at an
// eighth of the work, so the ASan stage runs it.
TEST(Gemma3Dummy, BatchingKeepsTheBitsWithASmallWindow) {
  model::LlamaConfig config = *model::LlamaConfig::named_shape("gemma3-270m");
  config.sliding_window = 64;
  config.n_vocab = 8192;
  expect_batching_keeps_the_bits(config);
}

}  // namespace
}  // namespace troupe::gpu::cpu
