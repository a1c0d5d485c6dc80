// Pre-tokenization for byte-level BPE: splits text into the pieces that BPE then merges
// independently. Each `tokenizer.ggml.pre` regex list is implemented by hand-written matchers
// over code points (std::regex has no \p{L}), reproducing llama.cpp's unicode_regex_split,
// including its custom GPT-2 / Llama 3 splitters and their piece-boundary behaviour.
//
// Thread-safety: a PreTokenizer is immutable; split() may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::model {

enum class PreTokenizerKind : uint8_t {
  kDefault,  // llama.cpp's "default": punctuation runs, GPT-2, then digit triples
  kGpt2,     // the single GPT-2 regex
  kSmollm,   // every \p{N} alone, then GPT-2
  kLlama3,   // Llama 3 regex (\p{N}{1,3})
  kQwen2,    // Llama 3 regex with single digits
};

class PreTokenizer {
 public:
  explicit PreTokenizer(PreTokenizerKind kind) : kind_(kind) {}

  // Maps a GGUF `tokenizer.ggml.pre` value; throws std::runtime_error for an unknown one.
  static PreTokenizerKind kind_from_name(std::string_view pre);

  PreTokenizerKind kind() const { return kind_; }

  // Splits raw UTF-8 (invalid bytes become U+FFFD, as in llama.cpp) and returns each piece
  // re-encoded as UTF-8 and then byte-mapped to GPT-2's alphabet, ready for BPE.
  std::vector<std::string> split(std::string_view text) const;

  // The same split, as piece lengths in code points over `cpts`.
  std::vector<size_t> split_codepoints(const std::vector<char32_t>& cpts) const;

 private:
  PreTokenizerKind kind_;
};

}  // namespace troupe::model
