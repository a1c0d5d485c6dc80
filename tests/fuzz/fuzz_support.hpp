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

// Runs `work` and aborts when it took more than `base_ms` + `us_per_byte` per input byte of CPU
// time, twice in a row: a superlinear blow-up (a quadratic scan, a backtracking matcher) shows
// up as a finding long before it becomes a denial of service. Only a second slow run counts, as
// the first run of a new path can pay one-off costs (page faults of a fresh allocation, a busy
// neighbour's cache misses) that are not the code's. The budgets are generous: the build has
// ASan, UBSan and coverage instrumentation, which cost 3-10x. `work` must be repeatable.
template <typename Work>
void within_cpu_budget(const char* what, size_t num_bytes, double us_per_byte, double base_ms,
                       Work&& work) {
  const double limit_s = base_ms * 1e-3 + us_per_byte * 1e-6 * static_cast<double>(num_bytes);
  double spent = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const double start = thread_cpu_seconds();
    work();
    spent = thread_cpu_seconds() - start;
    if (spent <= limit_s) return;
  }
  TROUPE_FUZZ_CHECK(spent <= limit_s, "%s took %.1f ms of CPU for %zu bytes, twice (budget %.1f ms)",
                    what, spent * 1e3, num_bytes, limit_s * 1e3);
}

// models/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/setup downloads it), or $TROUPE_TEST_MODEL.
inline std::filesystem::path default_model_path() {
  if (const char* env = std::getenv("TROUPE_TEST_MODEL")) return env;
  return std::filesystem::path(TROUPE_SOURCE_DIR) / "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace troupe::fuzz
