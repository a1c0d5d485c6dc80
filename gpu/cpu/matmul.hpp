// Batched matrix product y = x W^T for quantized and float weights: the CPU backend's hot loop.
//
// One weight pass serves the whole batch: W is repacked once (PackedMatrix) into tiles of
// kTileOutputs output rows, interleaved so that one SIMD lane holds one output; the kernels walk
// a tile's blocks once and reuse each unpacked weight vector for every activation row.
//
// Numerics (what must hold): for every (row r, output o) the value is computed by the same
// sequence of floating-point operations, whatever the batch size, the row's position in the
// batch, the tiling or the thread count:
//   quantized W (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0), activations quantized per 32-block to int8 (scale dx, sum sx),
//   in ggml's AVX2 order (ggml_vec_dot_q4_1_q8_1 / _q8_0_q8_0 / _q4_0_q8_0 / _q5_0_q8_0 /
//   _q5_1_q8_1, llamafile's tinyBLAS_Q0_AVX for Q8_0), so logits are bit-equal to llama.cpp's
//   x86 build:
//     lane[0..7] = 0, msum = 0; for block b in order:
//       for group k = 0..7: isum_k = exact int32 dot of inputs 4k..4k+3 (weights minus offset)
//                           lane[k] = fma(dw[b] * dx[b], float(isum_k), lane[k])
//       Q4_1/Q5_1 only: msum = fma(m[b], fp16(dx[b] * float(sum_q[b])), msum)
//     y = ((lane0+lane4) + (lane2+lane6)) + ((lane1+lane5) + (lane3+lane7))   (hsum_float_8)
//     Q4_1/Q5_1 only: y += msum
//   K-quant W (Q4_K/Q5_K/Q6_K): against Q8_K activations (per 256), in llama.cpp's two orders
//   (matmul_q8k.hpp), bit-equal to its x86 build; W is kept as ggml stores it, not tiled.
//   float W (F32/F16/BF16): acc = 0; for k in order: acc = fma(float(w[k]), x[k], acc)
// Integer dot products are exact and the float lanes are fixed by the order above, so the AVX-512,
// AVX2 and scalar paths return bit-identical results (the tests check this). Threads split
// output tiles, never a reduction. This is what makes a sequence's logits batch-invariant.
//
// Thread-safety: PackedMatrix is immutable after pack() and shared freely; matmul() may run
// concurrently on different outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/cpu/cpu_features.hpp"
#include "gpu/cpu/matmul_q8k.hpp"
#include "model/quants/dequantize.hpp"
#include "model/quants/q4_q8.hpp"
#include "model/tensor_type.hpp"

namespace troupe::gpu::cpu {

class ThreadPool;

// Elements per Q8 activation block: the weights' 32-value block, so that one weight block meets
// one activation block (K-quant sub-blocks are 32 too).
inline constexpr int kQuantBlock = model::quants::kBlockElements;
inline constexpr int kTileOutputs = 16;   // output rows per packed tile (one AVX-512 lane each)

// Activation rows quantized to int8 per 32-element block (Q8_0 scale, plus the block sums that
// Q4_0/Q4_1/Q8_0 offsets need). Reused across every weight that reads the same activations.
struct QuantizedRows {
  int64_t num_rows = 0;
  int64_t num_cols = 0;  // a multiple of kQuantBlock
  std::vector<int8_t> qs;            // [num_rows][num_cols]
  std::vector<float> scale;          // [num_rows][num_blocks]  dx = fp16(amax / 127)
  std::vector<int32_t> sum;          // [num_rows][num_blocks]  sum of the block's int8 values
  std::vector<float> scaled_sum;     // [num_rows][num_blocks]  fp16(amax / 127 * float(sum))
  // [num_rows][num_cols / 4]  -128 * (sum of each 4 consecutive int8 values): the offset term
  // of a 4-input group against weights stored with +128 (Q8_0); shifted right by 4, Q4_0's -8.
  std::vector<int32_t> group_bias;

  // Q8_K blocks of the same rows ([num_rows][num_cols / 256]) for K-quant weights, when
  // num_cols is a multiple of 256; empty otherwise.
  std::vector<BlockQ8K> q8k;

  int64_t num_blocks() const { return num_cols / kQuantBlock; }
};

// Quantizes rows of x (row stride ldx). Round to nearest even, as cvtps2dq does. Every isa
// gives bit-identical results. Fills q8k too when num_cols is a multiple of 256.
void quantize_rows(const float* x, int64_t ldx, int64_t num_rows, int64_t num_cols,
                   QuantizedRows& out, IsaLevel isa = IsaLevel::kScalar);

// Sizes `out` for num_rows x num_cols (keeps capacity), then quantize_row_range fills rows
// [row_begin, row_end) from x's rows of the same index (threads fill disjoint ranges).
void resize_quantized_rows(QuantizedRows& out, int64_t num_rows, int64_t num_cols,
                           bool q8k = false);
void quantize_row_range(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end,
                        QuantizedRows& out, IsaLevel isa = IsaLevel::kScalar);
// Rows [row_begin, row_end) of `out.q8k` (sized by resize_quantized_rows with q8k = true).
void quantize_q8k_range(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end,
                        QuantizedRows& out);

// Storage formats of packed weights. Q5_0 packs as kQ8_0 (matmul_kernels.hpp says why); Q5_1 has
// its own. K-quants (Q4_K/Q5_K/Q6_K) are not tiled: kKQuantRows keeps ggml's rows, multiplied
// against Q8_K activations (matmul_q8k.hpp).
enum class PackedFormat { kQ4_0, kQ4_1, kQ8_0, kQ5_1, kKQuantRows, kF32, kF16, kBF16 };

// True when `type` can be packed (and so multiplied).
bool is_supported_weight_type(model::TensorType type);

class PackedMatrix {
 public:
  PackedMatrix() = default;

  // Repacks a ggml row-major matrix: `num_outputs` rows of `num_inputs` elements of `type`
  // (GGUF dims [num_inputs, num_outputs]). Throws std::invalid_argument for an unsupported type
  // or a num_inputs that is not a multiple of the type's block.
  static PackedMatrix pack(model::TensorType type, const void* data, int64_t num_outputs,
                           int64_t num_inputs);

  PackedFormat format() const { return format_; }
  model::TensorType source_type() const { return source_type_; }
  bool quantized() const {
    return format_ == PackedFormat::kQ4_0 || format_ == PackedFormat::kQ4_1 ||
           format_ == PackedFormat::kQ8_0 || format_ == PackedFormat::kQ5_1 ||
           format_ == PackedFormat::kKQuantRows;
  }
  // K-quants: rows kept in ggml's layout, multiplied against QuantizedRows::q8k.
  bool q8k() const { return format_ == PackedFormat::kKQuantRows; }
  int64_t num_outputs() const { return num_outputs_; }
  int64_t num_inputs() const { return num_inputs_; }
  int64_t num_tiles() const { return (num_outputs_ + kTileOutputs - 1) / kTileOutputs; }
  size_t tile_bytes() const { return tile_bytes_; }
  const std::byte* tile(int64_t t) const { return data_.get() + static_cast<size_t>(t) * tile_bytes_; }
  size_t bytes() const { return tile_bytes_ * static_cast<size_t>(num_tiles()); }

 private:
  struct FreeAligned {
    void operator()(std::byte* p) const;
  };
  PackedFormat format_ = PackedFormat::kF32;
  model::TensorType source_type_ = model::TensorType::kF32;
  int64_t num_outputs_ = 0;
  int64_t num_inputs_ = 0;
  size_t tile_bytes_ = 0;
  std::shared_ptr<std::byte> data_;
};

// The activations of one matmul: float rows always; quantized rows when the weight is
// quantized (quantize once, share across the weights that read the same input).
struct MatmulInput {
  const float* x = nullptr;  // [num_rows][ldx]
  int64_t ldx = 0;
  int64_t num_rows = 0;
  const QuantizedRows* q = nullptr;
  // K-quant weights: llama.cpp's order for each row (matmul_q8k.hpp); nullptr: kVecDot.
  const Q8KOrder* q8k_orders = nullptr;
};

// y[r][o] (row stride ldy) for every row of `in` and every output of `w`, at `isa`, split over
// the pool's threads by output tiles (pool may be null: the calling thread does it all).
void matmul(const PackedMatrix& w, const MatmulInput& in, float* y, int64_t ldy,
            ThreadPool* pool, IsaLevel isa);

// The same, over a range of tiles on the calling thread (what each pool thread runs).
void matmul_tiles(const PackedMatrix& w, const MatmulInput& in, float* y, int64_t ldy,
                  int64_t tile_begin, int64_t tile_end, IsaLevel isa);

// Plain scalar reference straight from the ggml layout (no packing), same numerics as above:
// the optimized paths must match it bit for bit.
void matmul_reference(model::TensorType type, const void* w, int64_t num_outputs,
                      int64_t num_inputs, const MatmulInput& in, float* y, int64_t ldy);

// Dequantizes one ggml row to float (embedding look-up, tests): the reference dequantizers of
// model/quants/, the ones the numerics above are checked against.
using model::quants::dequantize_row;

}  // namespace troupe::gpu::cpu
