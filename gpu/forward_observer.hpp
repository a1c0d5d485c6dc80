// What a parity probe sees of a forward pass, the same on every backend: each named
// intermediate as rows x cols floats with row stride ld, in the names llama.cpp's graph uses
// (attn_norm, qkv, qk_rope, kqv_out, ffn_inp, ffn_norm, gate_up, ffn_swiglu, l_out, result_norm).
// layer -1: after the last layer. A backend that is given an observer calls it on the thread
// running the step, between its phases (the CUDA backend synchronizes its stream and copies each
// intermediate to the host first), so probes compare backends op by op.
//
// Thread-safety: a plain type; the observer is called from one thread at a time.
#pragma once

#include <cstdint>
#include <functional>

namespace troupe::gpu {

using ForwardObserver = std::function<void(const char* name, int32_t layer, const float* data,
                                           int64_t rows, int64_t cols, int64_t ld)>;

}  // namespace troupe::gpu
