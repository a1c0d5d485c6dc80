// K-quant super-block codecs (see kquant.hpp; facts checked against ggml's ggml-quants.c).
#include "model/quants/kquant.hpp"

#include <algorithm>
#include <cmath>

#include "model/fp16.hpp"

namespace troupe::model::quants {
namespace {

int round_clamp(float v, int lo, int hi) {
  return std::clamp(static_cast<int>(std::nearbyint(v)), lo, hi);
}

// Rounds f to fp16 into `field` and returns the stored value (what a dequantizer reads back).
float store_half_field(uint16_t& field, float f) {
  field = fp32_to_fp16(f);
  return fp16_to_fp32(field);
}

int code_of(const BlockQ4_K& blk, int i) { return q4_k_code(blk, i); }
int code_of(const BlockQ5_K& blk, int i) { return q5_k_code(blk, i); }

// Q4_K and Q5_K share everything but the code width and where the codes live.
template <class Block>
void dequantize_row_q45(const void* row, int64_t n, float* out) {
  for (int64_t b = 0; b < n / kSuperBlockElements; ++b) {
    const auto blk = load_block<Block>(row, b);
    const float d = fp16_to_fp32(blk.d), dmin = fp16_to_fp32(blk.dmin);
    for (int j = 0; j < kKSubBlocks; ++j) {
      const ScaleMin sm = scale_min_k4(j, blk.scales);
      const float d1 = d * sm.scale, m1 = dmin * sm.min;
      for (int l = 0; l < kKSubBlockElements; ++l) {
        const int i = kKSubBlockElements * j + l;
        out[b * kSuperBlockElements + i] = d1 * static_cast<float>(code_of(blk, i)) - m1;
      }
    }
  }
}

// Writes code q (kBits wide) of value i into a Q4_K/Q5_K block's qs (and qh).
void put_code(BlockQ4_K& blk, int i, int q) {
  const int c = i / 64, l = i % 64;
  blk.qs[32 * c + l % 32] |= static_cast<uint8_t>((q & 0x0F) << (l < 32 ? 0 : 4));
}
void put_code(BlockQ5_K& blk, int i, int q) {
  const int c = i / 64, l = i % 64;
  blk.qs[32 * c + l % 32] |= static_cast<uint8_t>((q & 0x0F) << (l < 32 ? 0 : 4));
  blk.qh[l % 32] |= static_cast<uint8_t>((q >> 4) << (2 * c + l / 32));
}

// Per 32-value sub-block: range [min(0, lo), hi] over (1 << kBits) - 1 steps; the 6-bit scales
// and mins are quantized against the super-block's largest.
template <class Block, int kBits>
void quantize_row_q45(const float* x, int64_t n, void* out) {
  constexpr int kMaxCode = (1 << kBits) - 1;
  for (int64_t b = 0; b < n / kSuperBlockElements; ++b) {
    const float* xb = x + b * kSuperBlockElements;
    Block blk{};
    float scale[kKSubBlocks], neg_min[kKSubBlocks], max_scale = 0, max_min = 0;
    for (int j = 0; j < kKSubBlocks; ++j) {
      const float* xs = xb + kKSubBlockElements * j;
      const auto [lo, hi] = std::minmax_element(xs, xs + kKSubBlockElements);
      neg_min[j] = -std::min(0.0f, *lo);
      scale[j] = (*hi + neg_min[j]) / kMaxCode;
      max_scale = std::max(max_scale, scale[j]);
      max_min = std::max(max_min, neg_min[j]);
    }
    const float d = store_half_field(blk.d, max_scale / 63.0f);
    const float dmin = store_half_field(blk.dmin, max_min / 63.0f);
    uint8_t sc[kKSubBlocks], mn[kKSubBlocks];
    for (int j = 0; j < kKSubBlocks; ++j) {
      sc[j] = static_cast<uint8_t>(d > 0 ? round_clamp(scale[j] / d, 0, 63) : 0);
      mn[j] = static_cast<uint8_t>(dmin > 0 ? round_clamp(neg_min[j] / dmin, 0, 63) : 0);
    }
    pack_scale_min_k4(sc, mn, blk.scales);
    for (int i = 0; i < kSuperBlockElements; ++i) {
      const int j = i / kKSubBlockElements;
      const float step = d * sc[j];
      put_code(blk, i, step > 0 ? round_clamp((xb[i] + dmin * mn[j]) / step, 0, kMaxCode) : 0);
    }
    store_block(out, b, blk);
  }
}

}  // namespace

void pack_scale_min_k4(const uint8_t (&scale)[8], const uint8_t (&min)[8], uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>((scale[j] & 63) | ((scale[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>((min[j] & 63) | ((min[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((scale[j + 4] & 0x0F) | ((min[j + 4] & 0x0F) << 4));
  }
}

// Chunk c = i / 64 of qs holds values 64c..64c+31 in its low nibbles, 64c+32..64c+63 in its high.
int q4_k_code(const BlockQ4_K& block, int i) {
  const uint8_t v = block.qs[32 * (i / 64) + i % 32];
  return (i % 64) < 32 ? (v & 0x0F) : (v >> 4);
}

// The fifth bit of value i: bit (2c + half) of qh[i % 32], half = which nibble of chunk c.
int q5_k_code(const BlockQ5_K& block, int i) {
  const uint8_t v = block.qs[32 * (i / 64) + i % 32];
  const int low = (i % 64) < 32 ? (v & 0x0F) : (v >> 4);
  const int bit = (block.qh[i % 32] >> (2 * (i / 64) + (i % 64) / 32)) & 1;
  return low | (bit << 4);
}

// Half h = i / 128; quarter k = (i % 128) / 32 takes the low (k < 2) or high nibble of
// ql[64h + 32 * (k % 2) + l] and bits 2k..2k+1 of qh[32h + l], l = i % 32.
int q6_k_code(const BlockQ6_K& block, int i) {
  const int h = i / 128, k = (i % 128) / 32, l = i % 32;
  const uint8_t v = block.ql[64 * h + 32 * (k % 2) + l];
  const int low = k < 2 ? (v & 0x0F) : (v >> 4);
  const int high = (block.qh[32 * h + l] >> (2 * k)) & 3;
  return low | (high << 4);
}

void dequantize_row_q4_k(const void* row, int64_t n, float* out) {
  dequantize_row_q45<BlockQ4_K>(row, n, out);
}

void dequantize_row_q5_k(const void* row, int64_t n, float* out) {
  dequantize_row_q45<BlockQ5_K>(row, n, out);
}

void dequantize_row_q6_k(const void* row, int64_t n, float* out) {
  for (int64_t b = 0; b < n / kSuperBlockElements; ++b) {
    const auto blk = load_block<BlockQ6_K>(row, b);
    const float d = fp16_to_fp32(blk.d);
    for (int i = 0; i < kSuperBlockElements; ++i) {
      const float sc = static_cast<float>(blk.scales[i / 16]);
      out[b * kSuperBlockElements + i] = d * sc * static_cast<float>(q6_k_code(blk, i) - 32);
    }
  }
}

void quantize_row_q4_k(const float* x, int64_t n, void* out) {
  quantize_row_q45<BlockQ4_K, 4>(x, n, out);
}

void quantize_row_q5_k(const float* x, int64_t n, void* out) {
  quantize_row_q45<BlockQ5_K, 5>(x, n, out);
}

// Per 16-value sub-block: codes q - 32 in [-31, 31] over max |x|; the int8 sub-scales are
// quantized against the super-block's largest (d = largest / 127).
void quantize_row_q6_k(const float* x, int64_t n, void* out) {
  for (int64_t b = 0; b < n / kSuperBlockElements; ++b) {
    const float* xb = x + b * kSuperBlockElements;
    BlockQ6_K blk{};
    float scale[16], max_scale = 0;
    for (int s = 0; s < 16; ++s) {
      float amax = 0;
      for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(xb[16 * s + i]));
      scale[s] = amax / 31.0f;
      max_scale = std::max(max_scale, scale[s]);
    }
    const float d = store_half_field(blk.d, max_scale / 127.0f);
    for (int s = 0; s < 16; ++s) {
      blk.scales[s] = static_cast<int8_t>(d > 0 ? round_clamp(scale[s] / d, -128, 127) : 0);
    }
    for (int i = 0; i < kSuperBlockElements; ++i) {
      const float step = d * blk.scales[i / 16];
      const int q = (step != 0 ? round_clamp(xb[i] / step, -32, 31) : 0) + 32;
      const int h = i / 128, k = (i % 128) / 32, l = i % 32;
      blk.ql[64 * h + 32 * (k % 2) + l] |= static_cast<uint8_t>((q & 0x0F) << (k < 2 ? 0 : 4));
      blk.qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
    }
    store_block(out, b, blk);
  }
}

}  // namespace troupe::model::quants
