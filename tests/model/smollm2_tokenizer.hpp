// The default model's tokenizer for the tests that need the real vocabulary: loaded once per
// test executable (inline: one instance across its files); nullptr when the model file is
// absent (the tests then skip).
//
// Thread-safety: any thread (a function-local static).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "model/gguf.hpp"
#include "model/tokenizer.hpp"

namespace troupe::model {

inline std::filesystem::path smollm2_model_path() {
  if (const char* env = std::getenv("TROUPE_TEST_MODEL"); env != nullptr && *env != '\0')
    return env;
  return std::filesystem::path(TROUPE_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

inline const Tokenizer* smollm2_tokenizer() {
  static const std::unique_ptr<Tokenizer> tokenizer = []() -> std::unique_ptr<Tokenizer> {
    const auto path = smollm2_model_path();
    if (!std::filesystem::exists(path)) return nullptr;
    return std::make_unique<Tokenizer>(Tokenizer::from_gguf(GgufFile::open(path)));
  }();
  return tokenizer.get();
}

}  // namespace troupe::model
