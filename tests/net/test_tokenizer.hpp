// A tokenizer for tests and fuzz harnesses that need real tokenizer code without a model file:
// byte-level BPE over printable ASCII plus 'Ġ' (space), one token per character, and an
// <|endoftext|> control token as EOS.
//
// Thread-safety: a pure factory.
#pragma once

#include <cstdint>
#include <utility>

#include "model/tokenizer.hpp"

namespace troupe::net::testing {

inline model::Tokenizer make_test_tokenizer() {
  model::TokenizerVocab vocab;
  vocab.kind = model::TokenizerKind::kBytePairBpe;
  vocab.pre = "default";
  for (char c = '!'; c <= '~'; ++c) vocab.tokens.emplace_back(1, c);
  vocab.tokens.emplace_back("\xC4\xA0");  // 'Ġ'
  vocab.tokens.emplace_back("<|endoftext|>");
  vocab.token_types.assign(vocab.tokens.size(), model::TokenType::kNormal);
  vocab.token_types.back() = model::TokenType::kControl;
  vocab.eos_id = static_cast<int32_t>(vocab.tokens.size() - 1);
  vocab.add_bos = false;
  return model::Tokenizer::from_vocab(std::move(vocab));
}

}  // namespace troupe::net::testing
