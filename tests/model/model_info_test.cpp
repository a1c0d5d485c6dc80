#include "model/model_info.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/model/gguf_writer.hpp"
#include "tests/support/source_dir.hpp"

namespace troupe::model {
namespace {

TEST(ModelInfo, ReadsTheCardFromTheHeader) {
  const auto path = testing::tiny_llama_file().write("Tiny-Model.Q4_1");
  const GgufFile file = GgufFile::open(path);
  const ModelInfo info = read_model_info(file);
  EXPECT_EQ(info.id, "Tiny-Model");
  EXPECT_EQ(info.name, "Tiny");
  EXPECT_EQ(info.architecture, "llama");
  EXPECT_EQ(info.context_length, 256u);
  EXPECT_EQ(info.num_layers, 1u);
  EXPECT_EQ(info.num_kv_heads, 4u);  // absent head_count_kv => head_count
  EXPECT_EQ(info.vocab_size, 3u);    // from the token list
  EXPECT_EQ(info.num_parameters, 32u * 3 + 32);
  EXPECT_EQ(info.quantization, "Q4_1");
  EXPECT_EQ(read_model_info(file, "custom").id, "custom");
  std::filesystem::remove(path);
}

TEST(ModelInfo, MissingRequiredKeyIsNamed) {
  testing::GgufWriter w;
  w.header(0, 1).kv_string("general.architecture", "llama");
  const auto path = w.write("nokeys");
  const GgufFile file = GgufFile::open(path);
  try {
    (void)read_model_info(file);
    FAIL();
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("llama.context_length"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(ModelInfo, DefaultModel) {
  const std::filesystem::path path = ::troupe::test_support::default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "default model not found at " << path;
  const GgufFile file = GgufFile::open(path);
  const ModelInfo info = read_model_info(file);
  EXPECT_EQ(info.id, "SmolLM2-135M-Instruct");
  EXPECT_EQ(info.architecture, "llama");
  EXPECT_EQ(info.num_layers, 30u);
  EXPECT_EQ(info.context_length, 8192u);
  EXPECT_EQ(info.quantization, "Q4_1");
  EXPECT_EQ(info.vocab_size, 49152u);
  EXPECT_GT(info.num_parameters, 130'000'000u);
  EXPECT_LT(info.num_parameters, 140'000'000u);
}

}  // namespace
}  // namespace troupe::model
