// The vocabulary as a grammar sees it: the bytes each token id stands for, the ids that end
// generation and the ids no grammar may ever produce. Built once per model at start-up from our
// GGUF tokenizer and handed to the GrammarCompiler (xgrammar's TokenizerInfo inside).
//
// How the vocabulary reaches xgrammar (the choice, and why):
//   xgrammar's VocabType (RAW / BYTE_FALLBACK / BYTE_LEVEL) only selects how it decodes the
//   "encoded" vocabulary it is given (tokenizer_info.cc, TokenDecoder::DecodeToken is its only
//   use). We give it each token's bytes already decoded by our own tokenizer
//   (Tokenizer::token_piece, llama.cpp parity tested) with VocabType::RAW, so:
//   - byte-level BPE (SmolLM2, Llama 3: GPT-2's byte-to-unicode alphabet) and SentencePiece
//     ('▁' for space, <0xNN> byte tokens) give the same bytes our detokenizer streams to the user:
//     the grammar constrains exactly the text the client receives;
//   - llama.cpp's USER_DEFINED tokens, whose GGUF text is raw (not byte-mapped), are not misread
//     by xgrammar's BYTE_LEVEL decoder (which would map e.g. 'é' to byte 0xE9);
//   - CONTROL / UNKNOWN / UNUSED tokens decode to "" and so become xgrammar "special" tokens,
//     which no grammar allows: `<|im_start|>` cannot appear inside a JSON string. (xgrammar's
//     Python from_huggingface keeps their text, which lets a model emit a control token as text.)
//   The test GrammarTokenizerInfo.AgreesWithXgrammarByteLevelDecoding checks that for SmolLM2's
//   normal tokens our bytes equal what xgrammar's BYTE_LEVEL decoder makes of the GGUF text.
//   Stop tokens: the tokenizer's end-of-generation set (EOS, EOT, `<|im_end|>`, ...); a grammar
//   allows them only once its root rule is complete.
//
// Thread-safety: immutable after construction; copies share the tables; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace troupe::model {
class Tokenizer;
}

namespace troupe::model::grammar {

class TokenizerInfo {
 public:
  // vocab_size: the width of the model's logits row when it exceeds the tokenizer's vocabulary
  // (padded embeddings); the extra ids are special (never allowed). Throws std::runtime_error
  // when xgrammar refuses the vocabulary: a start-up failure.
  static TokenizerInfo from_tokenizer(const Tokenizer& tokenizer,
                                      std::optional<size_t> vocab_size = std::nullopt);

  size_t vocab_size() const;         // bits per bitmask row
  size_t bitmask_num_words() const;  // uint32 words per bitmask row
  const std::vector<int32_t>& stop_token_ids() const;
  const std::vector<int32_t>& special_token_ids() const;  // never allowed by any grammar
  bool is_special(int32_t token_id) const;                // out of range: true
  // The bytes the grammar matches for this token ("" for special tokens and bad ids).
  std::string_view token_bytes(int32_t token_id) const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit TokenizerInfo(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace troupe::model::grammar
