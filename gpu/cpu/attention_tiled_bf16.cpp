// bf16 tiled prefill attention (see attention_tiled_bf16.hpp): conversion, the driver, and the
// scalar kernels that fix the order the AVX512-BF16 ones (attention_tiled_bf16_simd.cpp)
// reproduce.
#include "gpu/cpu/attention_tiled_bf16.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/fp16.hpp"

namespace troupe::gpu::cpu {
namespace {

constexpr int32_t kPanelKeys = 16;
constexpr int32_t kScoreKeyBlock = 64;  // as attention_tile's: a block of K panels stays in L1d

int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

// Words of key t's panel from the panels of key 0 (a panel is [hd / 2][16] words).
int64_t panel_words(int32_t t, int32_t hd) {
  return static_cast<int64_t>(t / kPanelKeys) * kPanelKeys * (hd / 2);
}

// vdpbf16ps' arithmetic on one lane: bf16 inputs with denormals read as zero, each product exact
// in fp32, each add rounded to nearest even and a denormal sum flushed to zero.
float bf16_in(uint16_t h) {
  return (h & 0x7f80u) == 0 ? 0.0f : model::bf16_to_fp32(h);
}
float dot_step(float acc, uint16_t a, uint16_t b) {
  const float sum = acc + bf16_in(a) * bf16_in(b);
  return std::fpclassify(sum) == FP_SUBNORMAL ? std::copysign(0.0f, sum) : sum;
}
float dot_pair(float acc, uint32_t a, uint32_t b) {
  acc = dot_step(acc, static_cast<uint16_t>(a >> 16), static_cast<uint16_t>(b >> 16));
  return dot_step(acc, static_cast<uint16_t>(a), static_cast<uint16_t>(b));
}

// Key t is the low (even t) or the high half of its pair's word.
void set_pair_half(uint32_t& word, int32_t half, uint16_t value) {
  const int shift = 16 * half;
  word = (word & ~(0xffffu << shift)) | (static_cast<uint32_t>(value) << shift);
}

}  // namespace

void detail::convert_keys_bf16_scalar(const uint16_t* k_src, const uint16_t* v_src, int32_t first,
                                      int32_t count, int32_t hd, uint32_t* k, uint32_t* v) {
  for (int32_t t = first; t < first + count; ++t) {
    const uint16_t* kr = k_src + static_cast<int64_t>(t - first) * hd;
    const uint16_t* vr = v_src + static_cast<int64_t>(t - first) * hd;
    uint32_t* kp = k + panel_words(t, hd) + t % kPanelKeys;
    for (int32_t p = 0; p < hd / 2; ++p) {
      kp[p * kPanelKeys] =
          bf16_pair(model::fp16_to_fp32(kr[2 * p]), model::fp16_to_fp32(kr[2 * p + 1]));
    }
    uint32_t* vp = v + static_cast<int64_t>(t / 2) * hd;
    for (int32_t d = 0; d < hd; ++d) {
      set_pair_half(vp[d], t % 2, model::fp32_to_bf16(model::fp16_to_fp32(vr[d])));
    }
  }
}

std::string_view to_string(PrefillAttentionPrecision precision) {
  return precision == PrefillAttentionPrecision::kBf16 ? "bf16" : "exact";
}

std::optional<PrefillAttentionPrecision> parse_prefill_attention_precision(std::string_view text) {
  if (text == "exact") return PrefillAttentionPrecision::kExact;
  if (text == "bf16") return PrefillAttentionPrecision::kBf16;
  return std::nullopt;
}

ConvertedHeadBf16::Words ConvertedHeadBf16::get(const KvLayerView& kv, const int32_t* block_table,
                                                int32_t kv_head, int32_t num_keys,
                                                Bf16Kernels kernels) {
  const int32_t hd = kv.head_dim;
  const bool simd = kernels != Bf16Kernels::kScalar && hd % 32 == 0;
  if (block_table != block_table_ || kv_head != kv_head_) {
    block_table_ = block_table;
    kv_head_ = kv_head;
    num_keys_ = 0;
  }
  if (num_keys > num_keys_) {
    // V's AMX tiles read 16 key pairs at a time: room for keys up to the next 32.
    const size_t words = static_cast<size_t>(round_up(num_keys, 2 * kPanelKeys) * hd / 2);
    if (k_.size() < words) {
      k_.resize(words);
      v_.resize(words);
    }
    for (int32_t t = num_keys_; t < num_keys;) {
      const int32_t slot = t % kv.block_size;
      const int32_t run = std::min(kv.block_size - slot, num_keys - t);
      const size_t at = kv.offset(block_table[t / kv.block_size], kv_head, slot);
      if (simd) {
        detail::convert_keys_bf16_avx512(kv.k + at, kv.v + at, t, run, hd, k_.data(), v_.data());
      } else {
        detail::convert_keys_bf16_scalar(kv.k + at, kv.v + at, t, run, hd, k_.data(), v_.data());
      }
      t += run;
    }
    // Whole panels and key pairs are read: zero what an earlier head or sequence left past the
    // last key.
    for (int32_t t = num_keys; t % kPanelKeys != 0; ++t) {
      uint32_t* kp = k_.data() + panel_words(t, hd) + t % kPanelKeys;
      for (int32_t p = 0; p < hd / 2; ++p) kp[p * kPanelKeys] = 0;
    }
    if (num_keys % 2 != 0) {
      uint32_t* vp = v_.data() + static_cast<int64_t>(num_keys / 2) * hd;
      for (int32_t d = 0; d < hd; ++d) set_pair_half(vp[d], 1, 0);
    }
    num_keys_ = num_keys;
  }
  return {k_.data(), v_.data()};
}

void AttentionTileBf16Scratch::grow(int32_t rows, int32_t num_keys, int32_t head_dim) {
  probs_stride_ = round_up(num_keys, 32) / 2;  // whole 16-word vectors of key pairs
  const size_t q_words = static_cast<size_t>(rows) * head_dim / 2;
  const size_t p_words = static_cast<size_t>(rows * probs_stride_);
  if (queries_.size() < q_words) queries_.resize(q_words);
  if (probs_.size() < p_words) probs_.resize(p_words);
}

void detail::tile_scores_bf16_scalar(const uint32_t* panels, int32_t first, int32_t count,
                                     int32_t hd, const uint32_t* q, const TileRows& rows) {
  for (int32_t r = 0; r < rows.num_rows; ++r) {
    const uint32_t* qr = q + static_cast<int64_t>(r) * hd / 2;
    const int32_t end = std::min(first + count, rows.keys[r]);
    for (int32_t t = first; t < end; ++t) {
      const uint32_t* k = panels + panel_words(t, hd) - panel_words(first, hd) + t % kPanelKeys;
      float acc = 0.0f;
      for (int32_t p = 0; p < hd / 2; ++p) acc = dot_pair(acc, k[p * kPanelKeys], qr[p]);
      rows.s[r * rows.s_stride + t] = acc;
    }
  }
}

void detail::tile_values_bf16_scalar(const uint32_t* v, int32_t pairs, int32_t hd,
                                     const uint32_t* p, int64_t p_stride, int32_t num_rows,
                                     float* out, int64_t out_stride) {
  for (int32_t r = 0; r < num_rows; ++r) {
    const uint32_t* pr = p + r * p_stride;
    float* o = out + r * out_stride;
    for (int32_t d = 0; d < hd; ++d) {
      float acc = 0.0f;
      for (int32_t u = 0; u < pairs; ++u) acc = dot_pair(acc, v[static_cast<int64_t>(u) * hd + d], pr[u]);
      o[d] = acc;
    }
  }
}

void detail::pack_probabilities_scalar(const TileRows& rows, uint32_t* probs, int64_t stride) {
  for (int32_t r = 0; r < rows.num_rows; ++r) {
    const float* s = rows.s + r * rows.s_stride;
    uint32_t* pr = probs + r * stride;
    const int32_t n = rows.keys[r];
    for (int32_t u = 0; u < stride; ++u) {
      const int32_t t = 2 * u;
      pr[u] = bf16_pair(t < n ? s[t] : 0.0f, t + 1 < n ? s[t + 1] : 0.0f);
    }
  }
}

Bf16Kernels best_bf16_kernels() {
  if (!bf16_attention_supported()) return Bf16Kernels::kScalar;
  return bf16_amx_supported() ? Bf16Kernels::kAmx : Bf16Kernels::kAvx512;
}

namespace {

Bf16Kernels kernels_for(Bf16Kernels wanted, int32_t hd) {
  if (wanted == Bf16Kernels::kAmx && (hd == 32 || hd == 64 || hd == 128)) return wanted;
  if (wanted != Bf16Kernels::kScalar && hd % 16 == 0) return Bf16Kernels::kAvx512;
  return Bf16Kernels::kScalar;
}

// Query rows as scaled bf16 pairs, [rows][hd / 2].
void gather_queries(const AttentionTile& shape, int32_t num_rows, uint32_t* q) {
  const int32_t hd = shape.head_dim;
  for (int32_t r = 0; r < num_rows; ++r) {
    const float* src = shape.q + static_cast<int64_t>(r / shape.group) * shape.q_stride +
                       static_cast<int64_t>(r % shape.group) * hd;
    for (int32_t p = 0; p < hd / 2; ++p) {
      q[r * hd / 2 + p] = bf16_pair(src[2 * p] * shape.scale, src[2 * p + 1] * shape.scale);
    }
  }
}

// Every row's scores, one block of K panels at a time (kept in L1d while every row reads it).
void score_pass(const uint32_t* k, int32_t num_keys, int32_t hd, const uint32_t* q,
                const detail::TileRows& rows, Bf16Kernels kernels) {
  for (int32_t first = 0; first < num_keys; first += kScoreKeyBlock) {
    const int32_t count = std::min(kScoreKeyBlock, num_keys - first);
    const uint32_t* panels = k + panel_words(first, hd);
    switch (kernels) {
      case Bf16Kernels::kScalar:
        detail::tile_scores_bf16_scalar(panels, first, count, hd, q, rows);
        break;
      case Bf16Kernels::kAvx512:
        detail::tile_scores_bf16_avx512(panels, first, count, hd, q, rows);
        break;
      case Bf16Kernels::kAmx: detail::tile_scores_bf16_amx(panels, first, count, hd, q, rows); break;
    }
  }
}

// The exact softmax over each row's own keys (the AVX-512 form gives the scalar's bits), then
// the probabilities as bf16 pairs.
void softmax_pass(const detail::TileRows& rows, uint32_t* probs, int64_t stride,
                  Bf16Kernels kernels) {
  if (kernels == Bf16Kernels::kScalar) {
    for (int32_t r = 0; r < rows.num_rows; ++r) {
      detail::softmax_row_scalar(rows.s + r * rows.s_stride, rows.keys[r], false);
    }
    return detail::pack_probabilities_scalar(rows, probs, stride);
  }
  detail::softmax_rows_avx512(rows, /*fp16_probabilities=*/false);
  detail::pack_probabilities_avx512(rows, probs, stride);
}

// Every row's outputs, [rows][hd] at out.
void value_pass(const uint32_t* v, int32_t num_keys, int32_t hd, const uint32_t* probs,
                int64_t stride, int32_t num_rows, float* out, Bf16Kernels kernels) {
  const int32_t pairs = (num_keys + 1) / 2;
  switch (kernels) {
    case Bf16Kernels::kScalar:
      return detail::tile_values_bf16_scalar(v, pairs, hd, probs, stride, num_rows, out, hd);
    case Bf16Kernels::kAvx512:
      return detail::tile_values_bf16_avx512(v, pairs, hd, probs, stride, num_rows, out, hd);
    case Bf16Kernels::kAmx:
      return detail::tile_values_bf16_amx(v, pairs, hd, probs, stride, num_rows, out, hd);
  }
}

}  // namespace

void attention_tile_bf16(const AttentionTileBf16& tile, AttentionTileScratch& scores,
                         AttentionTileBf16Scratch& scratch, Bf16Kernels kernels) {
  const AttentionTile& shape = tile.shape;
  const int32_t hd = shape.head_dim;
  const int32_t num_rows = shape.num_tokens * shape.group;
  const int32_t num_keys = shape.first_position + shape.num_tokens;  // the last token's
  kernels = kernels_for(kernels, hd);
  // Buffers of whole 16-row blocks, for the AMX tiles.
  const int32_t padded_rows = static_cast<int32_t>(round_up(num_rows, 16));
  scores.grow(padded_rows, num_keys, hd);
  scratch.grow(padded_rows, num_keys, hd);
  int32_t* keys = scores.row_keys();
  for (int32_t r = 0; r < num_rows; ++r) keys[r] = shape.first_position + r / shape.group + 1;
  const detail::TileRows rows{
      .num_rows = num_rows, .keys = keys, .s = scores.scores(), .s_stride = scores.scores_stride()};
  uint32_t* q = scratch.queries();
  gather_queries(shape, num_rows, q);

  score_pass(tile.k, num_keys, hd, q, rows, kernels);
  mask_tile_window(shape, rows.s, rows.s_stride);
  uint32_t* probs = scratch.probabilities();
  softmax_pass(rows, probs, scratch.probs_stride(), kernels);
  float* out = scores.lanes();  // [padded rows][hd] here
  value_pass(tile.v, num_keys, hd, probs, scratch.probs_stride(), num_rows, out, kernels);
  for (int32_t r = 0; r < num_rows; ++r) {
    std::memcpy(shape.out + static_cast<int64_t>(r / shape.group) * shape.out_stride +
                    static_cast<int64_t>(r % shape.group) * hd,
                out + static_cast<int64_t>(r) * hd, static_cast<size_t>(hd) * 4);
  }
}

}  // namespace troupe::gpu::cpu
