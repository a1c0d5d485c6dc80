// Block geometry of the ggml types (GGUF_NOTES.md §2, from ggml's ggml-common.h): the block
// formats' sizes are their structs' (model/quants/).
#include "model/tensor_type.hpp"

#include <array>
#include <stdexcept>

#include "model/quants/kquant.hpp"
#include "model/quants/q4_q8.hpp"
#include "model/quants/q5.hpp"

namespace troupe::model {
namespace {

struct Entry {
  TensorType type;
  TensorTypeTraits traits;
};

// Block formats take their geometry from their structs (model/quants/), so the two cannot drift.
template <class Block>
constexpr TensorTypeTraits block_traits(std::string_view name) {
  return {name, Block::kElements, sizeof(Block)};
}

constexpr std::array kTypes = {
    Entry{TensorType::kF32, {"F32", 1, 4}},
    Entry{TensorType::kF16, {"F16", 1, 2}},
    Entry{TensorType::kQ4_0, block_traits<quants::BlockQ4_0>("Q4_0")},
    Entry{TensorType::kQ4_1, block_traits<quants::BlockQ4_1>("Q4_1")},
    Entry{TensorType::kQ5_0, block_traits<quants::BlockQ5_0>("Q5_0")},
    Entry{TensorType::kQ5_1, block_traits<quants::BlockQ5_1>("Q5_1")},
    Entry{TensorType::kQ8_0, block_traits<quants::BlockQ8_0>("Q8_0")},
    Entry{TensorType::kQ8_1, block_traits<quants::BlockQ8_1>("Q8_1")},
    Entry{TensorType::kQ2_K, block_traits<quants::BlockQ2_K>("Q2_K")},
    Entry{TensorType::kQ3_K, block_traits<quants::BlockQ3_K>("Q3_K")},
    Entry{TensorType::kQ4_K, block_traits<quants::BlockQ4_K>("Q4_K")},
    Entry{TensorType::kQ5_K, block_traits<quants::BlockQ5_K>("Q5_K")},
    Entry{TensorType::kQ6_K, block_traits<quants::BlockQ6_K>("Q6_K")},
    Entry{TensorType::kQ8_K, block_traits<quants::BlockQ8_K>("Q8_K")},
    Entry{TensorType::kI8, {"I8", 1, 1}},
    Entry{TensorType::kI16, {"I16", 1, 2}},
    Entry{TensorType::kI32, {"I32", 1, 4}},
    Entry{TensorType::kI64, {"I64", 1, 8}},
    Entry{TensorType::kF64, {"F64", 1, 8}},
    Entry{TensorType::kBF16, {"BF16", 1, 2}},
};

}  // namespace

std::optional<TensorTypeTraits> tensor_type_traits(uint32_t type_id) {
  for (const Entry& e : kTypes) {
    if (static_cast<uint32_t>(e.type) == type_id) return e.traits;
  }
  return std::nullopt;
}

TensorTypeTraits traits_of(TensorType type) {
  if (auto t = tensor_type_traits(static_cast<uint32_t>(type))) return *t;
  throw std::logic_error("traits_of: TensorType enumerator missing from the table");
}

std::string_view tensor_type_name(TensorType type) { return traits_of(type).name; }

std::optional<std::string_view> file_type_name(uint32_t file_type) {
  // llama.cpp's llama_ftype values.
  switch (file_type) {
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K";
    case 11: return "Q3_K_S";
    case 12: return "Q3_K_M";
    case 13: return "Q3_K_L";
    case 14: return "Q4_K_S";
    case 15: return "Q4_K_M";
    case 16: return "Q5_K_S";
    case 17: return "Q5_K_M";
    case 18: return "Q6_K";
    case 32: return "BF16";
    default: return std::nullopt;
  }
}

}  // namespace troupe::model
