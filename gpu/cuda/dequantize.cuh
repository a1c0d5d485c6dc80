// Weight dequantization at load: a GGUF matrix (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// Q4_K, Q5_K or Q6_K rows) already in device memory becomes a dense row-major F16 or BF16 matrix
// for cuBLAS (element decoding in device_util.cuh / dequant_quants.cuh). Runs once per weight
// at start-up; keeping Q4/Q8 weights quantized with a dequantizing GEMV is the alternative the
// device benchmark is meant to decide (4x fewer bytes per decode step at small batch).
//
// Thread-safety: enqueues on `stream`; the caller keeps `raw` alive until the stream passes it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda/kernel_types.cuh"

namespace troupe::gpu::cuda {

// raw: num_rows rows of num_cols elements of `type` (GGUF row layout, rows contiguous).
// out: [num_rows][num_cols] elements of `out_type`.
void dequantize_matrix(const void* raw, WeightType type, int64_t num_rows, int64_t num_cols,
                       void* out, ActType out_type, cudaStream_t stream);

}  // namespace troupe::gpu::cuda
