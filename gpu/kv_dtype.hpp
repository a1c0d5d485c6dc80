// The number format of the paged KV memory (`cache.kv_dtype`): fp16 (the default), llama.cpp's
// q8_0 blocks (CPU backend), or FP8 E4M3 (CUDA backend; gpu/fp8_e4m3.hpp, gpu/cuda/kv_memory.hpp).
// One K or V row (one token, one KV head) of head_dim values takes kv_row_bytes(): f16 2 bytes a
// value; q8_0 34 bytes per 32 values (an fp16 scale and 32 int8, ggml's block_q8_0, so rows
// compare byte for byte with llama.cpp's cache), 1.88x the tokens in the same memory; FP8 one
// byte a value (its scale is per tensor), 2x.
//
// Thread-safety: constants and pure functions.
#pragma once

#include <cstdint>
#include <string_view>

#include "model/enum_names.hpp"

namespace troupe::gpu {

enum class KvDtype { kF16, kQ8_0, kFp8E4M3 };

inline constexpr EnumNames<KvDtype, 3> kKvDtypeNames{
    {{{KvDtype::kF16, "f16"}, {KvDtype::kQ8_0, "q8_0"}, {KvDtype::kFp8E4M3, "fp8_e4m3"}}}};
static_assert(kKvDtypeNames.dense());

inline constexpr int32_t kQ8_0KvBlockValues = 32;
inline constexpr int32_t kQ8_0KvBlockBytes = 34;

// Whether rows of head_dim values can be stored in `dtype` (q8_0 needs whole 32-value blocks).
constexpr bool kv_dtype_fits(KvDtype dtype, int32_t head_dim) {
  return dtype != KvDtype::kQ8_0 || head_dim % kQ8_0KvBlockValues == 0;
}

// Bytes of one K or V row of head_dim values (kv_dtype_fits must hold).
constexpr int64_t kv_row_bytes(KvDtype dtype, int32_t head_dim) {
  switch (dtype) {
    case KvDtype::kF16: return int64_t{2} * head_dim;
    case KvDtype::kQ8_0: return int64_t{head_dim} / kQ8_0KvBlockValues * kQ8_0KvBlockBytes;
    case KvDtype::kFp8E4M3: return head_dim;
  }
  return int64_t{2} * head_dim;
}

}  // namespace troupe::gpu
