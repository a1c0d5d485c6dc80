// Tiled prefill attention in bf16 (cpu.prefill_attention = "bf16"): the same tiles as
// attention_tile (attention_tiled.hpp: a tile of consecutive query tokens of one sequence, one KV
// head and its query heads, the exact two-pass softmax), but Q, K, V and the probabilities are
// rounded to bf16 for the two dot products, which then run on AVX512-BF16's vdpbf16ps: two
// multiply-adds per fp32 lane, twice attention_tile's fma rate. Accumulation stays fp32.
//
// Not the default, and why: attention_tile reproduces llama.cpp's operation order bit for bit, so
// greedy output matches llama.cpp token for token; with every product rounded to bf16 (8
// significant bits against fp16's 11) it no longer does. What it buys is long-context prefill:
// attention is most of a 4k-token prompt's time, and exact fp32 fmas cap the 4k/512 prefill
// rate near 0.56 on the 2-core boxes, bf16 lifts it past 0.6 (bench/RESULTS.md). The
// tolerance, as tested (cpu_attention_tiled_bf16_test): a tile's outputs within 2e-2 of the
// exact tile relative to the largest |V| (bf16 K and V carry a relative error of up to 2^-9),
// and the real model's last-position logits of a 1k-token prompt keep their argmax. Decode
// tokens keep the exact per-token path whatever the setting.
//
// Order (the scalar twin fixes it; the AVX-512 kernels reproduce it bit for bit, the AMX tiles
// within rounding, see attention_tiled_bf16_amx.cpp):
//   q'          = bf16(q * scale)   (the scale folded into the query: a power of two for
//                                    head_dim 64, so then exact)
//   score(q, k) = acc, acc = 0; for each dim pair p (in order):
//                 acc += q'[2p+1] k[2p+1]; acc += q'[2p] k[2p]    (vdpbf16ps' order, each
//                 product exact in fp32, each add rounded)
//   out[d]      = acc, acc = 0; for each key pair (t, t+1), t even (in order):
//                 acc += p[t+1] v[t+1][d]; acc += p[t] v[t][d]
// Probabilities past a row's own keys are zero, so a row may run whole key pairs and panels.
//
// Thread-safety: as attention_tile: pure functions over caller-owned buffers; one
// ConvertedHeadBf16 and one AttentionTileScratch per thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "gpu/cpu/attention.hpp"
#include "gpu/cpu/attention_kernels.hpp"
#include "gpu/cpu/attention_tiled.hpp"
#include "model/fp16.hpp"

namespace troupe::gpu::cpu {

// How prompt tokens' attention is computed (ForwardConfig / CpuBackendConfig).
enum class PrefillAttentionPrecision {
  kExact,  // attention_tile: llama.cpp's operation order, bit for bit (the default)
  kBf16,   // attention_tile_bf16: bf16 products, fp32 sums; needs AVX512-BF16
};
std::string_view to_string(PrefillAttentionPrecision precision);
// "exact" | "bf16"; nullopt for anything else.
std::optional<PrefillAttentionPrecision> parse_prefill_attention_precision(std::string_view text);

// Two bf16 values in one 32-bit word, the first in the low half: vdpbf16ps' operand element.
// (model/fp16.hpp's rounding: to nearest even.)
inline uint32_t bf16_pair(float lo, float hi) {
  return static_cast<uint32_t>(model::fp32_to_bf16(lo)) |
         (static_cast<uint32_t>(model::fp32_to_bf16(hi)) << 16);
}

// Which kernels attention_tile_bf16 runs. kAvx512 needs bf16_attention_supported() and
// head_dim % 16 == 0, kAmx bf16_amx_supported() and head_dim 32, 64 or 128; a tile whose head
// size a level cannot take runs the next one down.
enum class Bf16Kernels { kScalar, kAvx512, kAmx };

// One thread's bf16 copy of one sequence's K and V for one KV head, keys [0, n), converted from
// the fp16 blocks as ConvertedHead does (successive tiles convert only the keys they add), in the
// layouts the kernels read:
//   K: 16-key panels of dim pairs, [head_dim / 2][16] words: key t, dims (2p, 2p+1) at
//      k + (t / 16) * 8 * head_dim + p * 16 + t % 16
//   V: key pairs, [head_dim] words per pair: keys (2u, 2u+1), dim d at v + u * head_dim + d
// (both AMX B-tile layouts as they stand). K past n up to the next 16 keys is zero; V up to the
// next 32 keys is readable and finite.
class ConvertedHeadBf16 {
 public:
  void reset() { num_keys_ = 0; }  // as ConvertedHead::reset

  struct Words {
    const uint32_t* k;
    const uint32_t* v;
  };
  // kernels: kScalar converts with the scalar code, any other level with AVX512-BF16.
  Words get(const KvLayerView& kv, const int32_t* block_table, int32_t kv_head, int32_t num_keys,
            Bf16Kernels kernels);

 private:
  std::vector<uint32_t> k_, v_;
  const int32_t* block_table_ = nullptr;
  int32_t kv_head_ = -1;
  int32_t num_keys_ = 0;
};

// A tile as attention_tile's (k and v unused), with K and V from ConvertedHeadBf16::get.
struct AttentionTileBf16 {
  AttentionTile shape;  // every field but k, v and fp16_probabilities
  const uint32_t* k = nullptr;
  const uint32_t* v = nullptr;
};

// One thread's bf16 working buffers (beside AttentionTileScratch's fp32 scores).
class AttentionTileBf16Scratch {
 public:
  void grow(int32_t rows, int32_t num_keys, int32_t head_dim);
  uint32_t* queries() { return queries_.data(); }      // [rows][head_dim / 2] pairs
  uint32_t* probabilities() { return probs_.data(); }  // [rows][probs_stride()] key pairs
  int64_t probs_stride() const { return probs_stride_; }

 private:
  std::vector<uint32_t> queries_, probs_;
  int64_t probs_stride_ = 0;
};

// The best level this CPU runs (kScalar when bf16_attention_supported() is false;
// cpu_features.hpp).
Bf16Kernels best_bf16_kernels();

// Writes tile.shape.out for every token and query head. scores provides the fp32 scores and
// the outputs' buffer (its lanes).
void attention_tile_bf16(const AttentionTileBf16& tile, AttentionTileScratch& scores,
                         AttentionTileBf16Scratch& scratch, Bf16Kernels kernels);

namespace detail {
// The kernels behind attention_tile_bf16 (public for their tests). q: [rows][hd / 2] pairs of
// the scaled queries; panels: the K words of ConvertedHeadBf16 from key `first` (first % 16 ==
// 0). Scores of whole 16-key panels up to each row block's last key are written (those past a
// row's keys are never read). AMX: rows' buffers padded to a multiple of 16 rows.
void tile_scores_bf16_scalar(const uint32_t* panels, int32_t first, int32_t count, int32_t hd,
                             const uint32_t* q, const TileRows& rows);
void tile_scores_bf16_avx512(const uint32_t* panels, int32_t first, int32_t count, int32_t hd,
                             const uint32_t* q, const TileRows& rows);
void tile_scores_bf16_amx(const uint32_t* panels, int32_t first, int32_t count, int32_t hd,
                          const uint32_t* q, const TileRows& rows);
// Row r's [hd] outputs at out + r * out_stride, over key pairs [0, pairs) of v (ConvertedHeadBf16
// layout); p: [rows][p_stride] pairs of probabilities, zero past each row's keys. AVX-512 form:
// hd % 16 == 0.
void tile_values_bf16_scalar(const uint32_t* v, int32_t pairs, int32_t hd, const uint32_t* p,
                             int64_t p_stride, int32_t num_rows, float* out, int64_t out_stride);
void tile_values_bf16_avx512(const uint32_t* v, int32_t pairs, int32_t hd, const uint32_t* p,
                             int64_t p_stride, int32_t num_rows, float* out, int64_t out_stride);
// Each row's probabilities (rows.s, after the softmax) as bf16 pairs, zero past its keys up to
// `stride` pairs (a multiple of 16). The same words at both levels but for denormal
// probabilities, which the AVX-512 form flushes to zero and every dot product reads as zero.
void pack_probabilities_scalar(const TileRows& rows, uint32_t* probs, int64_t stride);
void pack_probabilities_avx512(const TileRows& rows, uint32_t* probs, int64_t stride);
// Keys [first, first + count) of fp16 rows (key t at src + (t - first) * hd) into the K panels
// and V pairs of ConvertedHeadBf16 (k, v: its buffers from key 0). AVX-512: hd % 32 == 0.
void convert_keys_bf16_scalar(const uint16_t* k_src, const uint16_t* v_src, int32_t first,
                              int32_t count, int32_t hd, uint32_t* k, uint32_t* v);
void convert_keys_bf16_avx512(const uint16_t* k_src, const uint16_t* v_src, int32_t first,
                              int32_t count, int32_t hd, uint32_t* k, uint32_t* v);
// AMX: key pairs up to the next multiple of 16 are read (p zero there), rows as above.
void tile_values_bf16_amx(const uint32_t* v, int32_t pairs, int32_t hd, const uint32_t* p,
                          int64_t p_stride, int32_t num_rows, float* out, int64_t out_stride);
}  // namespace detail

}  // namespace troupe::gpu::cpu
