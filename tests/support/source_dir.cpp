#include "tests/support/source_dir.hpp"

#include <cstdlib>

namespace troupe::test_support {

std::filesystem::path source_dir() { return TROUPE_SOURCE_DIR; }

std::filesystem::path default_model_path() {
  if (const char* env = std::getenv("TROUPE_TEST_MODEL"); env != nullptr && *env != '\0')
    return env;
  return source_dir() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace troupe::test_support
