// Shared bits of the libFuzzer harnesses: a check that aborts with a message (libFuzzer then
// saves the input as a crash), a JSON validity oracle, a CPU-time budget per input byte, and
// the default model's path.
//
// Thread-safety: libFuzzer calls a harness from one thread; so do these helpers.
#pragma once

#include <simdjson.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace troupe::fuzz {

// A property the code under test must keep. A violation is a finding, like a crash.
#define TROUPE_FUZZ_CHECK(condition, ...)                                        \
  do {                                                                           \
    if (!(condition)) {                                                          \
      std::fprintf(stderr, "\n[fuzz] property violated at %s:%d: %s\n", __FILE__, \
                   __LINE__, #condition);                                        \
      std::fprintf(stderr, "[fuzz] " __VA_ARGS__);                               \
      std::fprintf(stderr, "\n");                                                \
      std::abort();                                                              \
    }                                                                            \
  } while (0)

// True when `text` is one well-formed JSON value in valid UTF-8 (what every response body,
// WebSocket frame and admin reply must be: JsonWriter promises it).
inline bool is_valid_json(std::string_view text) {
  static simdjson::dom::parser parser;
  simdjson::dom::element root;
  return parser.parse(simdjson::padded_string(text)).get(root) == simdjson::SUCCESS;
}

// CPU time of this thread (not wall time: the machine is shared, and a busy neighbour must not
// look like a slow tokenizer).
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Aborts when work on `num_bytes` of input took more than `base_ms` + `us_per_byte` per byte of
// CPU time: a superlinear blow-up (quadratic scans, catastrophic backtracking) shows up as a
// finding long before it becomes a denial of service. The budget is generous: the build has
// ASan, UBSan and coverage instrumentation, which cost 3-10x.
class CpuBudget {
 public:
  CpuBudget(size_t num_bytes, double us_per_byte, double base_ms = 20.0)
      : start_(thread_cpu_seconds()),
        limit_s_(base_ms * 1e-3 + us_per_byte * 1e-6 * static_cast<double>(num_bytes)),
        num_bytes_(num_bytes) {}
  void check(const char* what) const {
    const double spent = thread_cpu_seconds() - start_;
    TROUPE_FUZZ_CHECK(spent <= limit_s_, "%s took %.1f ms of CPU for %zu bytes (budget %.1f ms)",
                      what, spent * 1e3, num_bytes_, limit_s_ * 1e3);
  }

 private:
  double start_;
  double limit_s_;
  size_t num_bytes_;
};

// models/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/setup downloads it), or $TROUPE_TEST_MODEL.
inline std::filesystem::path default_model_path() {
  if (const char* env = std::getenv("TROUPE_TEST_MODEL")) return env;
  return std::filesystem::path(TROUPE_SOURCE_DIR) / "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace troupe::fuzz
