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
#include "tests/support/source_dir.hpp"

namespace troupe::model {

using ::troupe::test_support::default_model_path;

inline const Tokenizer* smollm2_tokenizer() {
  static const std::unique_ptr<Tokenizer> tokenizer = []() -> std::unique_ptr<Tokenizer> {
    const auto path = default_model_path();
    if (!std::filesystem::exists(path)) return nullptr;
    return std::make_unique<Tokenizer>(Tokenizer::from_gguf(GgufFile::open(path)));
  }();
  return tokenizer.get();
}

}  // namespace troupe::model
