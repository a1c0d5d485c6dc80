#include "model/gguf.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <span>

#include "tests/model/gguf_writer.hpp"
#include "tests/support/source_dir.hpp"

namespace troupe::model {
namespace {

using testing::GgufWriter;
using testing::tiny_llama_file;

using ::troupe::test_support::default_model_path;

// Expects open() to throw GgufError whose message contains `needle`.
void expect_rejected(const std::filesystem::path& path, std::string_view needle) {
  try {
    (void)GgufFile::open(path);
    FAIL() << "expected GgufError containing '" << needle << "'";
  } catch (const GgufError& e) {
    EXPECT_NE(std::string_view(e.what()).find(needle), std::string_view::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(GgufFile, ReadsATinyValidFile) {
  const auto path = tiny_llama_file().write("valid");
  const GgufFile file = GgufFile::open(path);
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.architecture(), "llama");
  EXPECT_EQ(file.get_uint("llama.block_count"), 1u);
  EXPECT_FLOAT_EQ(static_cast<float>(*file.get_float("llama.rope.freq_base")), 10000.0f);
  ASSERT_EQ(file.tensors().size(), 2u);
  const GgufTensorInfo* embd = file.find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, TensorType::kQ4_1);
  EXPECT_EQ(embd->dims[0], 32u);
  EXPECT_EQ(embd->rows(), 3u);
  EXPECT_EQ(embd->num_bytes, 60u);
  EXPECT_EQ(file.find_tensor("missing"), nullptr);
  const auto tokens = file.find("tokenizer.ggml.tokens")->as_string_array();
  ASSERT_TRUE(tokens);
  EXPECT_EQ(*tokens, (std::vector<std::string_view>{"a", "b", "c"}));
  // A u32 key is readable as int too, but not as a string or float.
  EXPECT_EQ(file.find("llama.block_count")->as_int(), 1);
  EXPECT_FALSE(file.get_string("llama.block_count"));
  EXPECT_THROW((void)file.require_string("llama.block_count"), GgufError);
  EXPECT_THROW((void)file.require_uint("llama.nope"), GgufError);
  std::filesystem::remove(path);
}

TEST(GgufFile, FromBytesReadsTheSameAsOpen) {
  GgufWriter w = tiny_llama_file();
  const auto path = w.write("from_bytes");
  const GgufFile mapped = GgufFile::open(path);
  const std::vector<uint8_t>& bytes = w.bytes();
  const GgufFile copied = GgufFile::from_bytes(std::as_bytes(std::span(bytes)), "tiny");
  EXPECT_EQ(copied.path(), "tiny");
  EXPECT_EQ(copied.file_size(), mapped.file_size());
  EXPECT_EQ(copied.data_offset(), mapped.data_offset());
  EXPECT_EQ(copied.metadata().size(), mapped.metadata().size());
  ASSERT_EQ(copied.tensors().size(), mapped.tensors().size());
  const GgufTensorInfo* embd = copied.find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->num_bytes, 60u);
  // Views point into the copy, not into the caller's buffer, and hold the same bytes.
  const auto* caller = reinterpret_cast<const std::byte*>(bytes.data());
  const std::less<const std::byte*> before;
  EXPECT_TRUE(before(embd->data, caller) || !before(embd->data, caller + bytes.size()));
  EXPECT_EQ(std::memcmp(embd->data, caller + copied.data_offset() + embd->offset, embd->num_bytes),
            0);
  // Errors name the given name, like a path.
  std::vector<uint8_t> truncated(bytes.begin(), bytes.begin() + 20);
  try {
    (void)GgufFile::from_bytes(std::as_bytes(std::span(truncated)), "cut");
    FAIL() << "expected GgufError";
  } catch (const GgufError& e) {
    EXPECT_TRUE(std::string_view(e.what()).starts_with("cut: invalid GGUF")) << e.what();
  }
  EXPECT_THROW((void)GgufFile::from_bytes({}, "empty"), GgufError);
  std::filesystem::remove(path);
}

TEST(GgufFile, EveryTruncationIsRejectedCleanly) {
  // Cutting the file at every byte of its header and into its data must give a GgufError,
  // never a crash or an out-of-bounds read (ASan checks the latter).
  GgufWriter w = tiny_llama_file();
  const std::vector<uint8_t> full = w.bytes();
  for (size_t cut = 0; cut < full.size(); ++cut) {
    const std::vector<uint8_t> prefix(full.begin(), full.begin() + static_cast<long>(cut));
    const auto path = GgufWriter::write_bytes("trunc", prefix);
    EXPECT_THROW((void)GgufFile::open(path), GgufError) << "cut at " << cut;
  }
  std::filesystem::remove(GgufWriter::write_bytes("trunc", {}));
}

TEST(GgufFile, RejectsWrongMagic) {
  GgufWriter w = tiny_llama_file();
  w.bytes()[0] = 'X';
  expect_rejected(w.write("magic"), "not a GGUF file");
}

TEST(GgufFile, RejectsUnsupportedVersion) {
  GgufWriter w;
  w.header(0, 0, /*version=*/1);
  expect_rejected(w.write("v1"), "v1 is not supported");
  GgufWriter w7;
  w7.header(0, 0, /*version=*/7);
  expect_rejected(w7.write("v7"), "unsupported GGUF version 7");
}

TEST(GgufFile, RejectsAbsurdCounts) {
  GgufWriter tensors;
  tensors.header(/*num_tensors=*/uint64_t{1} << 60, 0);
  expect_rejected(tensors.write("tensor_count"), "tensor_count");
  GgufWriter kvs;
  kvs.header(0, /*num_kv=*/~uint64_t{0});
  expect_rejected(kvs.write("kv_count"), "metadata_kv_count");
}

TEST(GgufFile, RejectsAbsurdStringAndArrayLengths) {
  GgufWriter w;
  w.header(0, 1);
  w.put<uint64_t>(uint64_t{1} << 62);  // key length
  w.zeros(16);
  expect_rejected(w.write("keylen"), "string length");

  GgufWriter a;
  a.header(0, 1);
  a.put_string("tokenizer.ggml.tokens");
  a.put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(uint64_t{1} << 40);
  expect_rejected(a.write("arraylen"), "cannot fit");
}

TEST(GgufFile, RejectsUnknownValueAndTensorTypes) {
  GgufWriter v;
  v.header(0, 1);
  v.put_string("general.architecture").put<uint32_t>(99);
  expect_rejected(v.write("valtype"), "unknown value type 99");

  GgufWriter t;
  t.header(1, 0);
  t.tensor_info("w", {32}, /*type=*/77, 0);
  t.align().zeros(64);
  expect_rejected(t.write("tensortype"), "tensor 'w'");
}

TEST(GgufFile, RejectsTensorsOutsideTheFile) {
  GgufWriter w;
  w.header(1, 0);
  w.tensor_info("w", {32, 4}, /*F32*/ 0, 0);  // 512 bytes, only 64 present
  w.align().zeros(64);
  expect_rejected(w.write("outside"), "outside the");

  GgufWriter m;
  m.header(1, 0);
  m.tensor_info("w", {32}, /*F32*/ 0, 3);
  m.align().zeros(256);
  expect_rejected(m.write("misaligned"), "not aligned");
}

TEST(GgufFile, RejectsBadShapes) {
  GgufWriter dims;
  dims.header(1, 0);
  dims.tensor_info("w", {1, 1, 1, 1, 1}, 0, 0);
  expect_rejected(dims.write("ndims"), "n_dims 5");

  GgufWriter zero;
  zero.header(1, 0);
  zero.tensor_info("w", {0}, 0, 0);
  expect_rejected(zero.write("zerodim"), "dimension 0 is 0");

  GgufWriter block;
  block.header(1, 0);
  block.tensor_info("w", {33}, /*Q4_0*/ 2, 0);
  block.align().zeros(64);
  expect_rejected(block.write("block"), "not a multiple");
}

TEST(GgufFile, RejectsDuplicatesAndBadBools) {
  GgufWriter k;
  k.header(0, 2).kv_u32("a", 1).kv_u32("a", 2);
  expect_rejected(k.write("dupkey"), "duplicate key");

  GgufWriter t;
  t.header(2, 0).tensor_info("w", {8}, 0, 0).tensor_info("w", {8}, 0, 32);
  t.align().zeros(64);
  expect_rejected(t.write("duptensor"), "duplicate tensor");

  GgufWriter b;
  b.header(0, 1).put_string("flag").put<uint32_t>(7).put<uint8_t>(2);
  expect_rejected(b.write("bool"), "neither 0 nor 1");
}

TEST(GgufFile, MissingFileIsAClearError) {
  expect_rejected("/nonexistent/dir/model.gguf", "cannot open");
}

TEST(GgufFile, ReadsTheDefaultModel) {
  const auto path = default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "default model not found at " << path;
  const GgufFile file = GgufFile::open(path);
  EXPECT_EQ(file.architecture(), "llama");
  EXPECT_EQ(file.tensors().size(), 272u);
  EXPECT_EQ(file.get_uint("llama.block_count"), 30u);
  EXPECT_EQ(file.get_uint("llama.embedding_length"), 576u);
  EXPECT_EQ(file.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(file.find("tokenizer.ggml.tokens")->size(), 49152u);
  const GgufTensorInfo* q = file.find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, TensorType::kQ4_1);
  EXPECT_EQ(q->dims[0], 576u);
  EXPECT_EQ(q->dims[1], 576u);
  const GgufTensorInfo* k = file.find_tensor("blk.0.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->dims[1], 192u);
}

}  // namespace
}  // namespace troupe::model
