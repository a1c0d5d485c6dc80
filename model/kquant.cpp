// K-quant super-block codecs (see kquant.hpp; facts checked against ggml's ggml-quants.c).
#include "model/kquant.hpp"
#include "model/fp16.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace troupe::model::kquant {
namespace {

using model::load_half;
using model::store_half;

int round_clamp(float v, int lo, int hi) {
  return std::clamp(static_cast<int>(std::nearbyint(v)), lo, hi);
}

// Q4_K and Q5_K share everything but the code width and where the codes live.
template <int kBits>
void dequantize_row_q45(const uint8_t* s, int64_t n, float* out) {
  constexpr int kBytes = kBits == 4 ? kQ4KBytes : kQ5KBytes;
  for (int64_t b = 0; b < n / kSuperBlock; ++b) {
    const uint8_t* blk = s + b * kBytes;
    const float d = load_half(blk), dmin = load_half(blk + 2);
    for (int j = 0; j < 8; ++j) {
      const ScaleMin sm = scale_min_k4(j, blk + kQ4KScales);
      const float d1 = d * sm.scale, m1 = dmin * sm.min;
      for (int l = 0; l < 32; ++l) {
        const int i = 32 * j + l;
        const int q = kBits == 4 ? q4_k_code(blk, i) : q5_k_code(blk, i);
        out[b * kSuperBlock + i] = d1 * static_cast<float>(q) - m1;
      }
    }
  }
}

// Per 32-value sub-block: range [min(0, lo), hi] over (1 << kBits) - 1 steps; the 6-bit scales
// and mins are quantized against the super-block's largest.
template <int kBits>
void quantize_row_q45(const float* x, int64_t n, uint8_t* out) {
  constexpr int kBytes = kBits == 4 ? kQ4KBytes : kQ5KBytes;
  constexpr int kMaxCode = (1 << kBits) - 1;
  for (int64_t b = 0; b < n / kSuperBlock; ++b) {
    const float* xb = x + b * kSuperBlock;
    uint8_t* blk = out + b * kBytes;
    std::memset(blk, 0, kBytes);
    float scale[8], neg_min[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      const auto [lo, hi] = std::minmax_element(xb + 32 * j, xb + 32 * j + 32);
      neg_min[j] = -std::min(0.0f, *lo);
      scale[j] = (*hi + neg_min[j]) / kMaxCode;
      max_scale = std::max(max_scale, scale[j]);
      max_min = std::max(max_min, neg_min[j]);
    }
    const float d = store_half(blk, max_scale / 63.0f);
    const float dmin = store_half(blk + 2, max_min / 63.0f);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>(d > 0 ? round_clamp(scale[j] / d, 0, 63) : 0);
      mn[j] = static_cast<uint8_t>(dmin > 0 ? round_clamp(neg_min[j] / dmin, 0, 63) : 0);
    }
    pack_scale_min_k4(sc, mn, blk + kQ4KScales);
    uint8_t* qs = blk + (kBits == 4 ? kQ4KQs : kQ5KQs);
    for (int i = 0; i < kSuperBlock; ++i) {
      const int j = i / 32, c = i / 64, l = i % 64;
      const float step = d * sc[j];
      const int q = step > 0 ? round_clamp((xb[i] + dmin * mn[j]) / step, 0, kMaxCode) : 0;
      qs[32 * c + l % 32] |= static_cast<uint8_t>((q & 0x0F) << (l < 32 ? 0 : 4));
      if (kBits == 5) blk[kQ5KQh + l % 32] |= static_cast<uint8_t>((q >> 4) << (2 * c + l / 32));
    }
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
int q4_k_code(const uint8_t* block, int i) {
  const uint8_t v = block[kQ4KQs + 32 * (i / 64) + i % 32];
  return (i % 64) < 32 ? (v & 0x0F) : (v >> 4);
}

// The fifth bit of value i: bit (2c + half) of qh[i % 32], half = which nibble of chunk c.
int q5_k_code(const uint8_t* block, int i) {
  const uint8_t v = block[kQ5KQs + 32 * (i / 64) + i % 32];
  const int low = (i % 64) < 32 ? (v & 0x0F) : (v >> 4);
  const int bit = (block[kQ5KQh + i % 32] >> (2 * (i / 64) + (i % 64) / 32)) & 1;
  return low | (bit << 4);
}

// Half h = i / 128; quarter k = (i % 128) / 32 takes the low (k < 2) or high nibble of
// ql[64h + 32 * (k % 2) + l] and bits 2k..2k+1 of qh[32h + l], l = i % 32.
int q6_k_code(const uint8_t* block, int i) {
  const int h = i / 128, k = (i % 128) / 32, l = i % 32;
  const uint8_t v = block[kQ6KQl + 64 * h + 32 * (k % 2) + l];
  const int low = k < 2 ? (v & 0x0F) : (v >> 4);
  const int high = (block[kQ6KQh + 32 * h + l] >> (2 * k)) & 3;
  return low | (high << 4);
}

void dequantize_row_q4_k(const void* row, int64_t n, float* out) {
  dequantize_row_q45<4>(static_cast<const uint8_t*>(row), n, out);
}

void dequantize_row_q5_k(const void* row, int64_t n, float* out) {
  dequantize_row_q45<5>(static_cast<const uint8_t*>(row), n, out);
}

void dequantize_row_q6_k(const void* row, int64_t n, float* out) {
  const auto* s = static_cast<const uint8_t*>(row);
  for (int64_t b = 0; b < n / kSuperBlock; ++b) {
    const uint8_t* blk = s + b * kQ6KBytes;
    const float d = load_half(blk + kQ6KD);
    for (int i = 0; i < kSuperBlock; ++i) {
      const int sc = static_cast<int8_t>(blk[kQ6KScales + i / 16]);
      out[b * kSuperBlock + i] = d * static_cast<float>(sc) * static_cast<float>(q6_k_code(blk, i) - 32);
    }
  }
}

void quantize_row_q4_k(const float* x, int64_t n, void* out) {
  quantize_row_q45<4>(x, n, static_cast<uint8_t*>(out));
}

void quantize_row_q5_k(const float* x, int64_t n, void* out) {
  quantize_row_q45<5>(x, n, static_cast<uint8_t*>(out));
}

// Per 16-value sub-block: codes q - 32 in [-31, 31] over max |x|; the int8 sub-scales are
// quantized against the super-block's largest (d = largest / 127).
void quantize_row_q6_k(const float* x, int64_t n, void* out_row) {
  auto* out = static_cast<uint8_t*>(out_row);
  for (int64_t b = 0; b < n / kSuperBlock; ++b) {
    const float* xb = x + b * kSuperBlock;
    uint8_t* blk = out + b * kQ6KBytes;
    std::memset(blk, 0, kQ6KBytes);
    float scale[16], max_scale = 0;
    for (int s = 0; s < 16; ++s) {
      float amax = 0;
      for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(xb[16 * s + i]));
      scale[s] = amax / 31.0f;
      max_scale = std::max(max_scale, scale[s]);
    }
    const float d = store_half(blk + kQ6KD, max_scale / 127.0f);
    for (int s = 0; s < 16; ++s) {
      blk[kQ6KScales + s] = static_cast<uint8_t>(d > 0 ? round_clamp(scale[s] / d, -128, 127) : 0);
    }
    for (int i = 0; i < kSuperBlock; ++i) {
      const float step = d * static_cast<int8_t>(blk[kQ6KScales + i / 16]);
      const int q = (step != 0 ? round_clamp(xb[i] / step, -32, 31) : 0) + 32;
      const int h = i / 128, k = (i % 128) / 32, l = i % 32;
      blk[kQ6KQl + 64 * h + 32 * (k % 2) + l] |= static_cast<uint8_t>((q & 0x0F) << (k < 2 ? 0 : 4));
      blk[kQ6KQh + 32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
    }
  }
}

}  // namespace troupe::model::kquant
