// CPUID-based dispatch (GCC/Clang __builtin_cpu_supports), see cpu_features.hpp.
#include "gpu/cpu/cpu_features.hpp"

#include <cstdlib>
#include <string>

namespace troupe::gpu::cpu {

std::string_view to_string(IsaLevel level) {
  switch (level) {
    case IsaLevel::kScalar: return "scalar";
    case IsaLevel::kAvx2: return "avx2";
    case IsaLevel::kAvx512Vnni: return "avx512vnni";
  }
  return "?";
}

IsaLevel supported_isa() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vnni");
  if (avx512) return IsaLevel::kAvx512Vnni;
  if (avx2) return IsaLevel::kAvx2;
#endif
  return IsaLevel::kScalar;
}

IsaLevel default_isa() {
  IsaLevel level = supported_isa();
  if (const char* env = std::getenv("TROUPE_CPU_ISA")) {
    const std::string want = env;
    IsaLevel cap = level;
    if (want == "scalar") cap = IsaLevel::kScalar;
    if (want == "avx2") cap = IsaLevel::kAvx2;
    if (want == "avx512" || want == "avx512vnni") cap = IsaLevel::kAvx512Vnni;
    if (static_cast<int>(cap) < static_cast<int>(level)) level = cap;
  }
  return level;
}

std::vector<IsaLevel> runnable_isas() {
  std::vector<IsaLevel> out;
  for (int l = 0; l <= static_cast<int>(supported_isa()); ++l) out.push_back(static_cast<IsaLevel>(l));
  return out;
}

}  // namespace troupe::gpu::cpu
