// The defaults that both sides of the scheduler/backend seam carry, declared once: the step
// limits the scheduler plans within and a backend sizes its scratch for, the KV block size, and
// the memory budgets. The settings registry's defaults (app/settings_list.cpp reads them from
// EngineConfig) are these; tests/app/settings_test.cpp fails when a layer's struct starts from
// another value. Constants: any thread.
#pragma once

#include <cstdint>

namespace troupe::gpu::defaults {

// Sequences and tokens in one step. Sized for the CPU backend: a 2048-token step of the
// default model takes ~2 s on two cores, and every decoding stream waits for it
// (actors/engine/engine_config.hpp says more). A GPU preset raises both (configs/h200.json).
inline constexpr int32_t kMaxNumSeqs = 64;
inline constexpr int32_t kMaxNumBatchedTokens = 2048;
// Tokens per KV block: vLLM's and llama.cpp's 16.
inline constexpr int32_t kBlockSize = 16;
// The CPU backend's KV pool when the block count is left to it.
inline constexpr int64_t kCpuKvMemoryBytes = 256ll << 20;
// The share of device memory the CUDA backend takes for weights, scratch and KV (vLLM's 0.9).
inline constexpr double kGpuMemoryUtilization = 0.9;

}  // namespace troupe::gpu::defaults
