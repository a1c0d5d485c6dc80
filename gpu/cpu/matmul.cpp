// Packing, activation quantization, dispatch, and the scalar paths of the batched matmul
// (see matmul.hpp for the numerics every path follows).
#include "gpu/cpu/matmul.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "model/fp16.hpp"
#include "gpu/cpu/isa_target.hpp"
#include "gpu/cpu/matmul_kernels.hpp"
#include "gpu/cpu/thread_pool.hpp"

namespace troupe::gpu::cpu {

using model::TensorType;

namespace {

// Round to nearest even for |v| < 2^22, bit-identical to cvtps2dq under the default MXCSR.
inline int32_t round_nearest_even(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  const float t = v + kMagic;  // two roundings; IEEE semantics (no -ffast-math) keep them
  return static_cast<int32_t>(t - kMagic);
}

std::string type_name(TensorType t) { return std::string(model::tensor_type_name(t)); }

}  // namespace

void resize_quantized_rows(QuantizedRows& out, int64_t num_rows, int64_t num_cols, bool q8k) {
  if (num_cols % kQuantBlock != 0) throw std::invalid_argument("quantize_rows: cols % 32 != 0");
  const int64_t nb = num_cols / kQuantBlock;
  out.num_rows = num_rows;
  out.num_cols = num_cols;
  if (static_cast<int64_t>(out.qs.size()) < num_rows * num_cols) out.qs.resize(num_rows * num_cols);
  if (static_cast<int64_t>(out.scale.size()) < num_rows * nb) {
    out.scale.resize(num_rows * nb);
    out.sum.resize(num_rows * nb);
    out.scaled_sum.resize(num_rows * nb);
  }
  if (static_cast<int64_t>(out.group_bias.size()) < num_rows * nb * 8) out.group_bias.resize(num_rows * nb * 8);
  if (q8k) {
    if (num_cols % kQ8KBlock != 0) throw std::invalid_argument("quantize_rows: Q8_K needs cols % 256 == 0");
    const size_t blocks = static_cast<size_t>(num_rows * (num_cols / kQ8KBlock));
    if (out.q8k.size() < blocks) out.q8k.resize(blocks);
  }
}

void quantize_q8k_range(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end,
                        QuantizedRows& out) {
  const int64_t blocks = out.num_cols / kQ8KBlock;
  for (int64_t r = row_begin; r < row_end; ++r) {
    quantize_row_q8k(x + r * ldx, out.num_cols, out.q8k.data() + r * blocks);
  }
}

void quantize_row_range(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end,
                        QuantizedRows& out, IsaLevel isa) {
  const int64_t num_cols = out.num_cols;
#if TROUPE_X86
  if (isa != IsaLevel::kScalar) {
    const detail::QuantizeJob job{x, ldx, num_cols, out.qs.data(), out.scale.data(), out.sum.data(),
                                  out.scaled_sum.data(), out.group_bias.data()};
    if (isa == IsaLevel::kAvx512Vnni) {
      detail::quantize_rows_avx512(job, row_begin, row_end);
    } else {
      detail::quantize_rows_avx2(job, row_begin, row_end);
    }
    return;
  }
#else
  (void)isa;
#endif
  const int64_t nb = num_cols / kQuantBlock;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* xr = x + r * ldx;
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = xr + b * kQuantBlock;
      float amax = 0.0f;
      for (int i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
      const float d = amax / 127.0f;
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;  // as ggml's quantize_row_q8_0/1
      int8_t* q = out.qs.data() + r * num_cols + b * kQuantBlock;
      int32_t sum = 0;
      for (int i = 0; i < kQuantBlock; ++i) {
        const int32_t v = std::clamp(round_nearest_even(xb[i] * id), -127, 127);
        q[i] = static_cast<int8_t>(v);
        sum += v;
      }
      for (int g = 0; g < kQuantBlock / 4; ++g) {
        out.group_bias[(r * nb + b) * 8 + g] = -128 * (q[4 * g] + q[4 * g + 1] + q[4 * g + 2] + q[4 * g + 3]);
      }
      // Scales rounded to fp16 as ggml's Q8_0/Q8_1 blocks store them (codes use the unrounded
      // 1/d), so logits track llama.cpp's closely.
      out.scale[r * nb + b] = model::fp16_to_fp32(model::fp32_to_fp16(d));
      out.sum[r * nb + b] = sum;
      out.scaled_sum[r * nb + b] = model::fp16_to_fp32(model::fp32_to_fp16(d * static_cast<float>(sum)));
    }
  }
}

void quantize_rows(const float* x, int64_t ldx, int64_t num_rows, int64_t num_cols,
                   QuantizedRows& out, IsaLevel isa) {
  const bool q8k = num_cols % kQ8KBlock == 0;
  resize_quantized_rows(out, num_rows, num_cols, q8k);
  quantize_row_range(x, ldx, 0, num_rows, out, isa);
  if (q8k) quantize_q8k_range(x, ldx, 0, num_rows, out);
}

bool is_supported_weight_type(TensorType type) {
  switch (type) {
    case TensorType::kF32:
    case TensorType::kF16:
    case TensorType::kBF16:
    case TensorType::kQ4_0:
    case TensorType::kQ4_1:
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kQ8_0:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K: return true;
    default: return false;
  }
}

void PackedMatrix::FreeAligned::operator()(std::byte* p) const { std::free(p); }

PackedMatrix PackedMatrix::pack(TensorType type, const void* data, int64_t num_outputs,
                                int64_t num_inputs) {
  PackedMatrix m;
  m.source_type_ = type;
  m.num_outputs_ = num_outputs;
  m.num_inputs_ = num_inputs;
  switch (type) {
    case TensorType::kF32: m.format_ = PackedFormat::kF32; break;
    case TensorType::kF16: m.format_ = PackedFormat::kF16; break;
    case TensorType::kBF16: m.format_ = PackedFormat::kBF16; break;
    case TensorType::kQ4_0: m.format_ = PackedFormat::kQ4_0; break;
    case TensorType::kQ4_1: m.format_ = PackedFormat::kQ4_1; break;
    case TensorType::kQ8_0:
    case TensorType::kQ5_0: m.format_ = PackedFormat::kQ8_0; break;  // see matmul_kernels.hpp
    case TensorType::kQ5_1: m.format_ = PackedFormat::kQ5_1; break;
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K: m.format_ = PackedFormat::kKQuantRows; break;
    default:
      throw std::invalid_argument("matmul: weight type " + type_name(type) +
                                  " is not supported by the CPU backend yet");
  }
  const bool quant = m.quantized();
  const int64_t type_block = model::traits_of(type).block_elements;
  if (quant && (num_inputs % kQuantBlock != 0 || num_inputs % type_block != 0)) {
    throw std::invalid_argument("matmul: " + type_name(type) + " row length " +
                                std::to_string(num_inputs) + " is not a multiple of " +
                                std::to_string(std::max<int64_t>(type_block, kQuantBlock)));
  }
  const auto* src = static_cast<const uint8_t*>(data);
  const size_t src_row = model::row_bytes(type, static_cast<uint64_t>(num_inputs));
  const bool kquant_rows = m.format_ == PackedFormat::kKQuantRows;
  // K-quants keep ggml's rows as they are, one "tile" per kTileOutputs rows.
  m.tile_bytes_ = kquant_rows ? src_row * kTileOutputs
                              : static_cast<size_t>(quant ? num_inputs / kQuantBlock : num_inputs) *
                                    detail::packed_block_bytes(m.format_);
  const size_t total = m.tile_bytes_ * static_cast<size_t>(m.num_tiles());
  auto* raw = static_cast<std::byte*>(std::aligned_alloc(64, (total + 63) / 64 * 64 + 64));
  if (raw == nullptr) throw std::bad_alloc();
  std::memset(raw, 0, total);  // padding rows and lanes stay zero
  m.data_ = std::shared_ptr<std::byte>(raw, FreeAligned{});
  if (kquant_rows) {
    std::memcpy(raw, src, src_row * static_cast<size_t>(num_outputs));
    return m;
  }

  for (int64_t t = 0; t < m.num_tiles(); ++t) {
    auto* tile = reinterpret_cast<uint8_t*>(raw + t * m.tile_bytes_);
    for (int lane = 0; lane < kTileOutputs; ++lane) {
      const int64_t o = t * kTileOutputs + lane;
      if (o >= num_outputs) break;  // padding lanes stay zero (scale 0)
      const uint8_t* row = src + static_cast<size_t>(o) * src_row;
      switch (m.format_) {
        case PackedFormat::kQ4_0:
        case PackedFormat::kQ4_1:
        case PackedFormat::kQ8_0:
        case PackedFormat::kQ5_1: detail::pack_legacy_lane(type, row, num_inputs, tile, lane); break;
        case PackedFormat::kKQuantRows: break;  // returned above
        case PackedFormat::kF32:
          for (int64_t k = 0; k < num_inputs; ++k) std::memcpy(tile + k * 64 + 4 * lane, row + 4 * k, 4);
          break;
        case PackedFormat::kF16:
        case PackedFormat::kBF16:
          for (int64_t k = 0; k < num_inputs; ++k) std::memcpy(tile + k * 32 + 2 * lane, row + 2 * k, 2);
          break;
      }
    }
  }
  return m;
}

namespace detail {

namespace {

// Weight `in` (0..31) of lane `lane` in a packed 32-value block, offset applied (Q4_0: -8,
// Q8_0: -128); layouts in matmul_kernels.hpp.
int32_t packed_legacy_weight(PackedFormat format, const uint8_t* blk, int lane, int in) {
  const bool has_min = format == PackedFormat::kQ4_1 || format == PackedFormat::kQ5_1;
  const uint8_t* qs = blk + packed_header_bytes(has_min);
  switch (format) {
    case PackedFormat::kQ8_0: return static_cast<int32_t>(qs[64 * (in / 4) + 4 * lane + in % 4]) - 128;
    case PackedFormat::kQ5_1: return qs[64 * (in / 4) + 4 * lane + in % 4];
    case PackedFormat::kQ4_0:
    case PackedFormat::kQ4_1: {
      // input 8p + j (low nibble) or 8p + 4 + j (high nibble) of chunk p
      const uint8_t v = qs[64 * (in / 8) + 4 * lane + (in % 4)];
      const int32_t w = (in % 8) < 4 ? (v & 0x0F) : (v >> 4);
      return format == PackedFormat::kQ4_0 ? w - 8 : w;
    }
    case PackedFormat::kKQuantRows:  // weights of no 32-value block at all
    case PackedFormat::kF32:
    case PackedFormat::kF16:
    case PackedFormat::kBF16: break;
  }
  return 0;
}

// Row r, output lane `lane` of a tile of a legacy quantized format, in ggml's order (matmul.hpp).
float legacy_lane_dot(const TileJob& job, const uint8_t* tile, int64_t r, int lane) {
  const int64_t nb = job.num_inputs / kQuantBlock;
  const int bb = packed_block_bytes(job.format);
  const bool has_min = job.format == PackedFormat::kQ4_1 || job.format == PackedFormat::kQ5_1;
  const int8_t* xq = job.xq + r * job.num_inputs;
  float lanes[8] = {};
  float msum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = tile + b * bb;
    const float scale = model::load_half(blk + 2 * lane) * job.dx[r * nb + b];
    const int8_t* xb = xq + b * kQuantBlock;
    for (int k = 0; k < 8; ++k) {  // 4-input group k: inputs 4k .. 4k+3
      int32_t isum = 0;
      for (int in = 4 * k; in < 4 * k + 4; ++in) isum += packed_legacy_weight(job.format, blk, lane, in) * xb[in];
      lanes[k] = std::fma(scale, static_cast<float>(isum), lanes[k]);
    }
    if (has_min) msum = std::fma(model::load_half(blk + kPackedMins + 2 * lane), job.xsx[r * nb + b], msum);
  }
  const float v0 = lanes[0] + lanes[4], v1 = lanes[1] + lanes[5];
  const float v2 = lanes[2] + lanes[6], v3 = lanes[3] + lanes[7];
  const float acc = (v0 + v2) + (v1 + v3);
  return has_min ? acc + msum : acc;
}

// Row r, output lane `lane` of a tile of a float format: one fma chain in input order.
float float_lane_dot(const TileJob& job, const uint8_t* tile, int64_t r, int lane) {
  const int stride = packed_block_bytes(job.format);
  const float* x = job.x + r * job.ldx;
  float acc = 0.0f;
  for (int64_t k = 0; k < job.num_inputs; ++k) {
    const uint8_t* p = tile + k * stride;
    float w;
    if (job.format == PackedFormat::kF32) {
      std::memcpy(&w, p + 4 * lane, 4);
    } else if (job.format == PackedFormat::kF16) {
      w = model::load_half(p + 2 * lane);
    } else {
      w = model::bf16_to_fp32(model::load_u16(p + 2 * lane));
    }
    acc = std::fma(w, x[k], acc);
  }
  return acc;
}

}  // namespace

// The portable path: the packed layout walked lane by lane with the numerics of matmul.hpp.
void matmul_tiles_scalar(const TileJob& job, int64_t tile_begin, int64_t tile_end) {
  const bool is_float = job.format == PackedFormat::kF32 || job.format == PackedFormat::kF16 ||
                        job.format == PackedFormat::kBF16;
  for (int64_t t = tile_begin; t < tile_end; ++t) {
    const auto* tile = reinterpret_cast<const uint8_t*>(job.tiles + t * job.tile_bytes);
    for (int64_t r = 0; r < job.num_rows; ++r) {
      for (int lane = 0; lane < kTileOutputs; ++lane) {
        const int64_t o = t * kTileOutputs + lane;
        if (o >= job.num_outputs) break;
        job.y[r * job.ldy + o] = is_float ? float_lane_dot(job, tile, r, lane)
                                          : legacy_lane_dot(job, tile, r, lane);
      }
    }
  }
}

}  // namespace detail

namespace {

detail::TileJob make_job(const PackedMatrix& w, const MatmulInput& in, float* y, int64_t ldy) {
  detail::TileJob job{};
  job.format = w.format();
  job.tiles = w.tile(0);
  job.tile_bytes = w.tile_bytes();
  job.num_outputs = w.num_outputs();
  job.num_inputs = w.num_inputs();
  job.num_rows = in.num_rows;
  job.x = in.x;
  job.ldx = in.ldx;
  job.y = y;
  job.ldy = ldy;
  if (w.quantized()) {
    if (in.q == nullptr || in.q->num_cols != w.num_inputs() || in.q->num_rows < in.num_rows) {
      throw std::invalid_argument("matmul: quantized weights need matching quantized activations");
    }
    job.xq = in.q->qs.data();
    job.dx = in.q->scale.data();
    job.xsum = in.q->sum.data();
    job.xsx = in.q->scaled_sum.data();
    job.xgb = in.q->group_bias.data();
  }
  return job;
}

// In tile-blocks (16 outputs x 32 inputs x 1 row): ~2-3 us of work on one core.
constexpr int64_t kMinParallelWork = 2048;

void run_tiles(const detail::TileJob& job, int64_t tile_begin, int64_t tile_end, IsaLevel isa) {
  switch (isa) {
    case IsaLevel::kAvx512Vnni: detail::matmul_tiles_avx512(job, tile_begin, tile_end); return;
    case IsaLevel::kAvx2: detail::matmul_tiles_avx2(job, tile_begin, tile_end); return;
    case IsaLevel::kScalar: detail::matmul_tiles_scalar(job, tile_begin, tile_end); return;
  }
}

}  // namespace

void matmul_tiles(const PackedMatrix& w, const MatmulInput& in, float* y, int64_t ldy,
                  int64_t tile_begin, int64_t tile_end, IsaLevel isa) {
  if (in.num_rows == 0) return;
  if (w.q8k()) {
    const int64_t blocks = w.num_inputs() / kQ8KBlock;
    if (in.q == nullptr || in.q->num_cols != w.num_inputs() ||
        in.q->q8k.size() < static_cast<size_t>(in.num_rows * blocks)) {
      throw std::invalid_argument("matmul: K-quant weights need Q8_K activations");
    }
    matmul_q8k_range(w.source_type(), reinterpret_cast<const uint8_t*>(w.tile(0)),
                     w.tile_bytes() / kTileOutputs, w.num_inputs(), in.q->q8k.data(), in.num_rows,
                     y, ldy, tile_begin * kTileOutputs,
                     std::min(tile_end * kTileOutputs, w.num_outputs()), isa, in.q8k_orders);
    return;
  }
  run_tiles(make_job(w, in, y, ldy), tile_begin, tile_end, isa);
}

void matmul(const PackedMatrix& w, const MatmulInput& in, float* y, int64_t ldy,
            ThreadPool* pool, IsaLevel isa) {
  if (in.num_rows == 0) return;
  // Small products (decode-size projections) run on the calling thread: waking the pool costs
  // more than it saves, especially on a loaded host. Splits never change results.
  const int64_t work = w.num_tiles() * in.num_rows *
                       (w.quantized() ? w.num_inputs() / kQuantBlock : w.num_inputs() / 8);
  if (pool == nullptr || pool->num_threads() == 1 || work < kMinParallelWork) {
    matmul_tiles(w, in, y, ldy, 0, w.num_tiles(), isa);
    return;
  }
  pool->parallel_for(w.num_tiles(), [&](int64_t b, int64_t e, int) {
    matmul_tiles(w, in, y, ldy, b, e, isa);
  });
}

void matmul_reference(TensorType type, const void* w, int64_t num_outputs, int64_t num_inputs,
                      const MatmulInput& in, float* y, int64_t ldy) {
  const auto* base = static_cast<const uint8_t*>(w);
  const size_t row_bytes = model::row_bytes(type, static_cast<uint64_t>(num_inputs));
  const int64_t nb = num_inputs / kQuantBlock;
  for (int64_t r = 0; r < in.num_rows; ++r) {
    for (int64_t o = 0; o < num_outputs; ++o) {
      const uint8_t* row = base + o * row_bytes;
      float acc = 0.0f;
      switch (type) {
        case TensorType::kQ4_0:
        case TensorType::kQ4_1:
        case TensorType::kQ5_0:
        case TensorType::kQ5_1:
        case TensorType::kQ8_0: {
          // ggml's order (matmul.hpp): 4-input groups in 8 float lanes, hsum_float_8, then
          // the m * s chain of the types with a min.
          const bool has_min = type == TensorType::kQ4_1 || type == TensorType::kQ5_1;
          const int8_t* xq = in.q->qs.data() + r * num_inputs;
          float lanes[8] = {};
          float msum = 0.0f;
          for (int64_t b = 0; b < nb; ++b) {
            const int8_t* xb = xq + b * kQuantBlock;
            const detail::LegacyBlock blk = detail::decode_legacy_block(type, row, b);
            const float scale = blk.d * in.q->scale[r * nb + b];
            for (int k = 0; k < 8; ++k) {
              int32_t isum = 0;
              for (int j = 4 * k; j < 4 * k + 4; ++j) isum += blk.q[j] * xb[j];
              lanes[k] = std::fma(scale, static_cast<float>(isum), lanes[k]);
            }
            if (has_min) msum = std::fma(blk.m, in.q->scaled_sum[r * nb + b], msum);
          }
          acc = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
          if (has_min) acc += msum;
          break;
        }
        case TensorType::kQ4_K:
        case TensorType::kQ5_K:
        case TensorType::kQ6_K:
          acc = dot_q8k(type, row, in.q->q8k.data() + r * (num_inputs / kQ8KBlock), num_inputs,
                        IsaLevel::kScalar,
                        in.q8k_orders != nullptr ? in.q8k_orders[r] : Q8KOrder::kVecDot);
          break;
        default: {
          std::vector<float> wrow(num_inputs);
          dequantize_row(type, row, num_inputs, wrow.data());
          const float* x = in.x + r * in.ldx;
          for (int64_t k = 0; k < num_inputs; ++k) acc = std::fma(wrow[k], x[k], acc);
          break;
        }
      }
      y[r * ldy + o] = acc;
    }
  }
}

}  // namespace troupe::gpu::cpu
