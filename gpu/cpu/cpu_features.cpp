// CPUID-based dispatch (GCC/Clang __builtin_cpu_supports), see cpu_features.hpp.
#include "gpu/cpu/cpu_features.hpp"

#include "model/enum_names.hpp"

#include <cstdlib>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace troupe::gpu::cpu {

constexpr EnumNames<IsaLevel, 3> kIsaLevelNames{{{
    {IsaLevel::kScalar, "scalar"}, {IsaLevel::kAvx2, "avx2"},
    {IsaLevel::kAvx512Vnni, "avx512vnni"}}}, "?"};

std::string_view to_string(IsaLevel level) { return kIsaLevelNames.name(level); }

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

bool bf16_attention_supported() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return supported_isa() == IsaLevel::kAvx512Vnni && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

bool bf16_amx_supported() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool supported = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool amx_bf16 = (edx >> 22) & 1u, amx_tile = (edx >> 24) & 1u;
    if (!amx_bf16 || !amx_tile) return false;
    // Linux hands out the tile data state only on request (ARCH_REQ_XCOMP_PERM for
    // XFEATURE_XTILEDATA).
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return supported;
#else
  return false;
#endif
}

}  // namespace troupe::gpu::cpu
