// Test helper: writes small GGUF files byte by byte, so tests can build valid files and then
// corrupt exactly one field.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

namespace troupe::model::testing {

class GgufWriter {
 public:
  template <typename T>
  GgufWriter& put(T value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
    return *this;
  }
  GgufWriter& put_string(std::string_view s) {
    put<uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  GgufWriter& header(uint64_t num_tensors, uint64_t num_kv, uint32_t version = 3) {
    put<uint32_t>(0x46554747);
    put<uint32_t>(version);
    put<uint64_t>(num_tensors);
    return put<uint64_t>(num_kv);
  }
  GgufWriter& kv_u32(std::string_view key, uint32_t v) {
    put_string(key);
    put<uint32_t>(4);
    return put<uint32_t>(v);
  }
  GgufWriter& kv_f32(std::string_view key, float v) {
    put_string(key);
    put<uint32_t>(6);
    return put<float>(v);
  }
  GgufWriter& kv_string(std::string_view key, std::string_view v) {
    put_string(key);
    put<uint32_t>(8);
    return put_string(v);
  }
  GgufWriter& kv_string_array(std::string_view key, const std::vector<std::string>& items) {
    put_string(key);
    put<uint32_t>(9);
    put<uint32_t>(8);
    put<uint64_t>(items.size());
    for (const auto& s : items) put_string(s);
    return *this;
  }
  GgufWriter& tensor_info(std::string_view name, std::vector<uint64_t> dims, uint32_t type,
                          uint64_t offset) {
    put_string(name);
    put<uint32_t>(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) put<uint64_t>(d);
    put<uint32_t>(type);
    return put<uint64_t>(offset);
  }
  GgufWriter& align(size_t alignment = 32) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
    return *this;
  }
  GgufWriter& zeros(size_t n) {
    bytes_.insert(bytes_.end(), n, 0);
    return *this;
  }

  std::vector<uint8_t>& bytes() { return bytes_; }

  std::filesystem::path write(const std::string& name) const { return write_bytes(name, bytes_); }

  static std::filesystem::path write_bytes(const std::string& name,
                                           const std::vector<uint8_t>& bytes) {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("troupe_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto path = dir / (name + ".gguf");
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return path;
  }

 private:
  std::vector<uint8_t> bytes_;
};

// A tiny valid llama-shaped file: metadata for read_model_info and two tensors.
inline GgufWriter tiny_llama_file() {
  GgufWriter w;
  w.header(/*num_tensors=*/2, /*num_kv=*/9);
  w.kv_string("general.architecture", "llama");
  w.kv_string("general.name", "Tiny");
  w.kv_u32("general.file_type", 3);
  w.kv_u32("llama.context_length", 256);
  w.kv_u32("llama.embedding_length", 32);
  w.kv_u32("llama.block_count", 1);
  w.kv_u32("llama.attention.head_count", 4);
  w.kv_f32("llama.rope.freq_base", 10000.0f);
  w.kv_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  w.tensor_info("token_embd.weight", {32, 3}, /*Q4_1*/ 3, 0);   // 3 rows x 20 bytes = 60 -> 64
  w.tensor_info("output_norm.weight", {32}, /*F32*/ 0, 64);     // 128 bytes
  w.align();
  w.zeros(64 + 128);
  return w;
}

}  // namespace troupe::model::testing
