// GEGLU gate (gemma3's feed-forward): out[i] = gelu_tanh(gate[i]) * up[i], with
//   gelu_tanh(z) = 0.5 z (1 + tanh(sqrt(2/pi) z (1 + 0.044715 z^2))).
// geglu() computes it as ggml's CPU backend does (GGML_GELU_FP16, ggml-cpu/vec.h
// ggml_vec_geglu_f32): z <= -10 gives 0, z >= 10 gives z * up, otherwise z is rounded to fp16
// and looked up in a 65,536-entry table of fp16 GELU values. The table is built with the inner
// 1 + 0.044715 z^2 as one fma, as an x86-64 FMA build of ggml computes it (checked entry by entry
// against the reference build's ggml_table_gelu_f16: 0 of the 63,490 finite entries differ; the
// unfused form differs in one).
//
// Thread-safety: pure functions over caller-owned buffers; the table is built once, thread-safely.
#pragma once

#include <cstdint>

namespace troupe::gpu::cpu {

void geglu(const float* gate, const float* up, float* out, int64_t n);
// Double-precision formula without the table, for tests.
void geglu_reference(const float* gate, const float* up, float* out, int64_t n);
// One table entry: the fp16 bits of gelu_tanh(fp16 value `h`), as ggml's table holds them.
uint16_t gelu_fp16_table_entry(uint16_t h);

}  // namespace troupe::gpu::cpu
