// Run-time CPU feature detection for the CPU backend's kernels.
//
// Every optimized kernel exists at up to three levels; the backend picks the best level this CPU
// supports once, at start-up. TROUPE_CPU_ISA=scalar|avx2|avx512 caps the level (for tests and for
// comparing paths on one machine).
//
// Thread-safety: callable from any thread (bf16_amx_supported() asks the kernel once, under a
// function-local static).
#pragma once

#include <string_view>
#include <vector>

namespace troupe::gpu::cpu {

enum class IsaLevel {
  kScalar = 0,      // portable C++ (the reference)
  kAvx2 = 1,        // AVX2 + FMA + F16C (Haswell and later, Zen)
  kAvx512Vnni = 2,  // AVX-512 F/BW/VL/DQ + VNNI (Ice Lake, Sapphire Rapids, Zen 4+)
};

std::string_view to_string(IsaLevel level);

// Highest level the CPU supports (ignores the environment).
IsaLevel supported_isa();

// The level kernels use: supported_isa(), capped by TROUPE_CPU_ISA when set.
IsaLevel default_isa();

// Every level this CPU can run, lowest first (tests iterate over these).
std::vector<IsaLevel> runnable_isas();

// Beyond the levels, for the bf16 prompt attention (attention_tiled_bf16.hpp), which no level
// implies. True when this CPU runs vdpbf16ps (AVX512-BF16) and the AVX-512 level its kernels
// need.
bool bf16_attention_supported();
// True when it runs AMX-BF16 tiles and Linux granted this process the tile state (asked once,
// on the first call: the permission is process-wide).
bool bf16_amx_supported();

}  // namespace troupe::gpu::cpu
