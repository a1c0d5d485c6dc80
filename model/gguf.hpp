// A validating GGUF (v2/v3) reader over a read-only memory mapping.
//
// Every count, length, offset and type read from the file is checked against the file's size
// before it is used; a truncated or corrupt file throws GgufError naming the field, never reads
// out of bounds (docs/design.md §3). Strings, arrays and tensor data are views into the mapping,
// so a 100 MB model "loads" in microseconds and pages in on first touch.
//
// Thread-safety: open() from any thread; a GgufFile is immutable afterwards and may be read from
// any number of threads. Views stay valid while the GgufFile (or an object it was moved into)
// lives.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "model/tensor_type.hpp"

namespace troupe::model {

// A file that is not valid GGUF, or one troupe cannot read. A start-up failure, so an exception.
class GgufError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view to_string(GgufValueType type);

// One metadata value. Scalars are stored decoded; strings and arrays point into the mapping.
// Accessors convert between integer widths (range-checked), since converters write the same key
// as u32 in one file and u64 in another; a value of the wrong kind gives nullopt.
class GgufValue {
 public:
  GgufValueType type() const { return type_; }
  bool is_array() const { return type_ == GgufValueType::kArray; }

  std::optional<uint64_t> as_uint() const;
  std::optional<int64_t> as_int() const;
  std::optional<double> as_float() const;  // float kinds only
  std::optional<bool> as_bool() const;
  std::optional<std::string_view> as_string() const;

  // Arrays.
  GgufValueType element_type() const { return element_type_; }
  uint64_t size() const { return count_; }
  std::optional<std::vector<std::string_view>> as_string_array() const;
  std::optional<std::vector<int64_t>> as_int_array() const;    // any integer element type
  std::optional<std::vector<float>> as_float_array() const;    // float32 / float64 elements

 private:
  friend class GgufParser;
  GgufValueType type_ = GgufValueType::kUint8;
  GgufValueType element_type_ = GgufValueType::kUint8;  // arrays only
  union {
    uint64_t u;
    int64_t i;
    double f;
  } scalar_{};
  const std::byte* data_ = nullptr;  // string bytes, or first array element
  uint64_t count_ = 0;               // string length in bytes, or array element count
};

struct GgufTensorInfo {
  std::string name;
  TensorType type = TensorType::kF32;
  uint32_t num_dims = 0;
  std::array<uint64_t, 4> dims{1, 1, 1, 1};  // dims[0] is the contiguous axis (ggml's ne[0])
  uint64_t num_elements = 0;
  uint64_t offset = 0;     // from the start of the data section
  uint64_t num_bytes = 0;
  const std::byte* data = nullptr;  // into the mapping

  uint64_t rows() const { return num_elements / dims[0]; }
  std::span<const std::byte> bytes() const { return {data, num_bytes}; }
};

class GgufFile {
 public:
  // Maps and validates the whole header (metadata and tensor infos). Throws GgufError.
  static GgufFile open(const std::filesystem::path& path);
  // The same checks over a GGUF image in memory, which is copied (the views point into the
  // copy). `name` stands for the path in error messages. For tests and fuzzing, which make
  // files by the thousand; a served model is always mapped with open().
  static GgufFile from_bytes(std::span<const std::byte> bytes,
                             std::filesystem::path name = "<memory>");

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::filesystem::path& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return file_size_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }

  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;

  // Typed look-ups; nullopt when absent or of the wrong kind.
  std::optional<uint64_t> get_uint(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string_view> get_string(std::string_view key) const;

  // Like get_uint, but a missing or mistyped key throws GgufError naming it.
  uint64_t require_uint(std::string_view key) const;
  std::string_view require_string(std::string_view key) const;

  // `general.architecture` ("llama", ...); throws when absent.
  std::string_view architecture() const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;

 private:
  friend class GgufParser;
  struct Mapping;
  GgufFile();

  std::filesystem::path path_;
  std::unique_ptr<Mapping> mapping_;
  uint32_t version_ = 0;
  uint64_t file_size_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace troupe::model
