// Private to the tokenizer's .cpp files: the tables behind Tokenizer and the two merge engines.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/pretokenizer.hpp"
#include "model/tokenizer.hpp"

namespace troupe::model {

struct TransparentStringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TextToId = std::unordered_map<std::string, int32_t, TransparentStringHash, std::equal_to<>>;

struct BpeMerge {
  int32_t rank;
  int32_t result_id;  // symbol id of the concatenation (may be a virtual id >= vocab size)
};

struct Tokenizer::Impl {
  TokenizerVocab vocab;
  TextToId text_to_id;  // real tokens; a duplicated text maps to its last id (as in llama.cpp)
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
  size_t max_token_bytes = 1;  // the longest token piece (special texts included)

  // Special-token partition: CONTROL / USER_DEFINED / UNKNOWN ids, longest text first.
  std::vector<int32_t> special_ids;
  std::vector<TokenType> effective_types;  // vocab types, with EOG texts forced to CONTROL
  std::vector<int32_t> eog_ids;            // sorted
  std::vector<bool> is_eog;

  // Byte-level BPE.
  PreTokenizer pre_tokenizer{PreTokenizerKind::kDefault};
  bool ignore_merges = false;
  // Symbol ids: a real token's id, or a virtual id (>= vocab size) for merge operands and
  // results that are not tokens, so merges can be looked up by (left id, right id).
  TextToId virtual_symbol_ids;
  std::unordered_map<uint64_t, BpeMerge> merges;
  std::array<int32_t, 256> single_byte_ids{};  // ids of one-byte texts (BPE fallback), -1 none

  // SentencePiece.
  std::array<int32_t, 256> byte_token_ids{};  // <0xNN>, -1 when absent

  int32_t find(std::string_view text) const {
    const auto it = text_to_id.find(text);
    return it == text_to_id.end() ? -1 : it->second;
  }
  int32_t symbol_id(std::string_view text) const {
    if (const int32_t id = find(text); id >= 0) return id;
    const auto it = virtual_symbol_ids.find(text);
    return it == virtual_symbol_ids.end() ? -1 : it->second;
  }
  float score(int32_t id) const {
    return static_cast<size_t>(id) < vocab.scores.size() ? vocab.scores[id] : 0.0f;
  }
};

// Encodes one pre-token (already byte-mapped) with byte-level BPE, appending ids.
void bpe_encode_piece(const Tokenizer::Impl& t, std::string_view word, std::vector<int32_t>& out);
// Builds virtual_symbol_ids / merges / single_byte_ids from vocab.merges.
void bpe_build_tables(Tokenizer::Impl& t);

// Encodes one raw-text fragment (spaces already escaped to U+2581, prefix already added) with
// SentencePiece merging by score and <0xNN> byte fallback, appending ids.
void spm_encode_fragment(const Tokenizer::Impl& t, std::string_view text,
                         std::vector<int32_t>& out);
void spm_build_tables(Tokenizer::Impl& t);

}  // namespace troupe::model
