// ggml tensor element types as GGUF stores them, and their block geometry.
//
// Thread-safety: pure functions and constants; callable from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace troupe::model {

// Values are the on-disk ggml_type ids (GGUF_NOTES.md §2); gaps are ids ggml removed.
enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

struct TensorTypeTraits {
  std::string_view name;      // "Q4_1", as llama.cpp prints it
  uint32_t block_elements;    // elements per block (1 for plain types)
  uint32_t block_bytes;       // bytes per block
};

// Traits of a type id read from a file; nullopt for ids troupe does not know (the caller names
// the tensor in its error).
std::optional<TensorTypeTraits> tensor_type_traits(uint32_t type_id);

// Same, for a known enumerator.
TensorTypeTraits traits_of(TensorType type);

std::string_view tensor_type_name(TensorType type);

// Bytes of a row of `elements` elements; `elements` must be a multiple of the block size.
inline uint64_t row_bytes(TensorType type, uint64_t elements) {
  const TensorTypeTraits t = traits_of(type);
  return elements / t.block_elements * t.block_bytes;
}

// The quantization name of a GGUF `general.file_type` value ("Q4_1", "Q4_K_M", ...).
std::optional<std::string_view> file_type_name(uint32_t file_type);

}  // namespace troupe::model
