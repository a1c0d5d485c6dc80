// The model's tokenizer, built from GGUF metadata: byte-level BPE (`tokenizer.ggml.model = gpt2`,
// with the pre-tokenizer that `tokenizer.ggml.pre` names) or SentencePiece-style (`llama`, scores
// and <0xNN> byte fallback). It reproduces llama.cpp's llama_tokenize / llama_token_to_piece
// (tests/reference/smollm2_tokenize.json is llama.cpp's output on a 200+ string corpus).
//
// Special tokens (CONTROL / UNKNOWN types) in text become their ids only when parse_special is
// true, which only the chat-template path uses; user text encoded with parse_special = false
// cannot inject `<|im_end|>`. USER_DEFINED tokens are matched either way, as in llama.cpp.
//
// Thread-safety: immutable after construction; copies share the same tables and every method may
// be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/pretokenizer.hpp"

namespace troupe::model {

class GgufFile;

enum class TokenizerKind : uint8_t {
  kBytePairBpe,    // "gpt2"
  kSentencePiece,  // "llama"
};

// GGUF tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// A byte range [begin, end) of a text.
struct TextSpan {
  size_t begin = 0;
  size_t end = 0;
};

// Everything the tokenizer reads from a GGUF file; tests may fill one by hand.
struct TokenizerVocab {
  TokenizerKind kind = TokenizerKind::kBytePairBpe;
  std::string pre = "default";         // BPE only
  std::vector<std::string> tokens;     // id -> text
  std::vector<TokenType> token_types;  // empty: all normal
  std::vector<float> scores;           // SentencePiece merge priorities; empty: all 0
  std::vector<std::string> merges;     // BPE, "A B", rank = index
  std::optional<int32_t> bos_id, eos_id, unk_id, eot_id, eom_id, pad_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
};

class Tokenizer {
 public:
  // Throws std::runtime_error (GgufError for bad metadata) naming the key: a start-up failure.
  static Tokenizer from_gguf(const GgufFile& file);
  static Tokenizer from_vocab(TokenizerVocab vocab);

  // Token ids for `text`. With parse_special, control/unknown token texts become their ids.
  // Never prepends BOS: callers add bos_id() themselves when add_bos() says so.
  // max_tokens bounds the work for a text that may be far too long (a prompt past the context):
  // once more than max_tokens ids exist encoding stops, and the result (more than max_tokens
  // ids, a prefix's) only says "too long". Below the bound the result is the full encoding.
  std::vector<int32_t> encode(std::string_view text, bool parse_special,
                              size_t max_tokens = SIZE_MAX) const;
  // A rendered chat prompt: special tokens are parsed everywhere except where a match would
  // overlap one of `plain_spans` (the untrusted message contents, see ChatTemplate::render), so
  // the result equals llama.cpp's encode(text, special=true) unless a message tried to inject a
  // special token. Spans need not be sorted.
  std::vector<int32_t> encode_with_plain_spans(std::string_view text,
                                               std::span<const TextSpan> plain_spans,
                                               size_t max_tokens = SIZE_MAX) const;

  // The most input bytes one token stands for (its piece, special texts included): a text of
  // n bytes has at least n / max_token_bytes() tokens, which refuses a prompt that cannot fit
  // the context before any tokenizing.
  size_t max_token_bytes() const;

  // The tokens' pieces concatenated, as llama.cpp's token_to_piece gives them (so SentencePiece's
  // '▁' at the start stays a space). May end inside a UTF-8 character: stream through
  // IncrementalDetokenizer. Control tokens give their text only with render_special.
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;
  // One token's bytes (no leading-space removal). Out-of-range ids give "".
  std::string token_piece(int32_t id, bool render_special = false) const;
  // The vocabulary entry as stored (mapped alphabet for BPE, '▁' for SentencePiece).
  std::string_view token_text(int32_t id) const;
  std::optional<int32_t> find_token(std::string_view text) const;
  TokenType token_type(int32_t id) const;
  bool is_control(int32_t id) const;  // control or unknown: hidden unless rendered as special

  TokenizerKind kind() const;
  PreTokenizerKind pre_tokenizer() const;
  size_t vocab_size() const;
  int32_t bos_id() const;  // -1 when the vocabulary has none
  int32_t eos_id() const;
  bool add_bos() const;
  bool add_eos() const;

  // The stop set (GGUF_NOTES §6): eos, eot, eom and every token whose text is a known end text
  // (`<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`, ...), plus llama.cpp's FIM pad/repo/sep tokens.
  bool is_end_of_generation(int32_t id) const;
  const std::vector<int32_t>& end_of_generation_ids() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::vector<int32_t> encode_fragments(std::string_view text, bool parse_special,
                                        std::span<const TextSpan> plain_spans,
                                        size_t max_tokens) const;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace troupe::model
