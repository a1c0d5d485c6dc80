// Helpers shared by the CPU kernel and backend tests (the CUDA backend tests too, which compare
// against the CPU backend): random ggml-format weights and inputs, a tiny model config.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <vector>

#include "model/fp16.hpp"
#include "model/llama_config.hpp"
#include "model/quants/kquant.hpp"
#include "model/quants/q4_q8.hpp"
#include "model/quants/q5.hpp"
#include "model/tensor_type.hpp"
#include "tests/support/source_dir.hpp"

namespace troupe::gpu::cpu::testing {

// The default model (scripts/setup fetches it), or $TROUPE_TEST_MODEL. Tests that need it skip
// when the file is missing.
using ::troupe::test_support::default_model_path;

// The larger of a and b, NaN when either is. std::max(worst, NaN) is worst (its comparison is
// false), so a "largest difference under a bound" check built on it passes NaN results.
template <typename T>
T max_or_nan(T a, T b) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<T>::quiet_NaN() : std::max(a, b);
}

inline std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// num_outputs rows of num_inputs elements in ggml layout, random values of a typical scale.
inline std::vector<uint8_t> random_weights(model::TensorType type, int64_t num_outputs,
                                           int64_t num_inputs, uint64_t seed) {
  using model::TensorType;
  namespace quants = model::quants;
  std::mt19937_64 rng(seed);
  const size_t row = model::row_bytes(type, num_inputs);
  std::vector<uint8_t> w(row * num_outputs);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  auto put_half = [](uint8_t* p, float f) {
    const uint16_t h = model::fp32_to_fp16(f);
    std::memcpy(p, &h, 2);
  };
  for (int64_t o = 0; o < num_outputs; ++o) {
    uint8_t* r = w.data() + o * row;
    switch (type) {
      case TensorType::kF32:
        for (int64_t k = 0; k < num_inputs; ++k) {
          const float f = normal(rng);
          std::memcpy(r + 4 * k, &f, 4);
        }
        break;
      case TensorType::kF16:
        for (int64_t k = 0; k < num_inputs; ++k) put_half(r + 2 * k, normal(rng));
        break;
      case TensorType::kBF16:
        for (int64_t k = 0; k < num_inputs; ++k) {
          const uint16_t b = model::fp32_to_bf16(normal(rng));
          std::memcpy(r + 2 * k, &b, 2);
        }
        break;
      case TensorType::kQ4_0:
      case TensorType::kQ4_1:
      case TensorType::kQ8_0: {
        const int bytes = static_cast<int>(model::traits_of(type).block_bytes);
        for (int64_t b = 0; b < num_inputs / quants::kBlockElements; ++b) {
          uint8_t* blk = r + b * bytes;
          put_half(blk, scale(rng));
          int first = offsetof(quants::BlockQ4_0, qs);
          if (type == TensorType::kQ4_1) {
            put_half(blk + offsetof(quants::BlockQ4_1, m), -8.0f * scale(rng));
            first = offsetof(quants::BlockQ4_1, qs);
          }
          for (int i = first; i < bytes; ++i) {
            int v = byte(rng);
            if (type == TensorType::kQ8_0 && v == 128) v = 129;  // keep int8 in [-127, 127]
            blk[i] = static_cast<uint8_t>(v);
          }
        }
        break;
      }
      case TensorType::kQ4_K:
      case TensorType::kQ5_K:
      case TensorType::kQ6_K: {
        // Every byte pattern of scales, mins and codes is valid: random bytes cover the 6-bit
        // scale packing's high bits; only the fp16 super-block scales are set to sane values.
        const int bytes = static_cast<int>(model::traits_of(type).block_bytes);
        for (int64_t b = 0; b < num_inputs / quants::kSuperBlockElements; ++b) {
          uint8_t* blk = r + b * bytes;
          for (int i = 0; i < bytes; ++i) blk[i] = static_cast<uint8_t>(byte(rng));
          if (type == TensorType::kQ6_K) {
            put_half(blk + offsetof(quants::BlockQ6_K, d), scale(rng) / 16.0f);
          } else {
            put_half(blk, scale(rng) / 8.0f);
            put_half(blk + offsetof(quants::BlockQ4_K, dmin), scale(rng) / 8.0f);
          }
        }
        break;
      }
      case TensorType::kQ5_0:
      case TensorType::kQ5_1: {
        // Random qh and qs bytes (every 5-bit code); Q5_1's min near -16 steps centres them.
        const bool has_min = type == TensorType::kQ5_1;
        const int bytes = static_cast<int>(model::traits_of(type).block_bytes);
        for (int64_t b = 0; b < num_inputs / quants::kBlockElements; ++b) {
          uint8_t* blk = r + b * bytes;
          for (int i = 0; i < bytes; ++i) blk[i] = static_cast<uint8_t>(byte(rng));
          const float d = scale(rng) / 2.0f;
          put_half(blk, d);
          if (has_min) put_half(blk + offsetof(quants::BlockQ5_1, m), -16.0f * scale(rng) / 2.0f);
        }
        break;
      }
      default: break;
    }
  }
  return w;
}

// A tiny Llama (2 layers, 128 wide, 4 query heads on 2 KV heads, vocab 512) for dummy weights.
// Its 128-wide rows are too narrow for K-quants (256-element blocks): make_dummy_weights falls
// back as llama.cpp does, except in the 256-wide ffn_down.
inline model::LlamaConfig tiny_config() {
  model::LlamaConfig c;
  c.n_vocab = 512;
  c.n_embd = 128;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 32;
  c.n_rot = 32;
  c.n_ff = 256;
  c.context_length = 1024;
  c.rope_freq_base = 10000.0f;
  c.tied_output = true;
  return c;
}

}  // namespace troupe::gpu::cpu::testing
