// A tokenizer for tests and fuzz harnesses that need real tokenizer code without a model file:
// byte-level BPE over printable ASCII plus 'Ġ' (space), one token per character, then
// `extra_tokens` (texts in GPT-2's byte alphabet), and an <|endoftext|> control token as EOS.
//
// Thread-safety: a pure factory.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/tokenizer.hpp"

namespace troupe::net::testing {

inline model::Tokenizer make_test_tokenizer(std::vector<std::string> extra_tokens = {}) {
  model::TokenizerVocab vocab;
  vocab.kind = model::TokenizerKind::kBytePairBpe;
  vocab.pre = "default";
  for (char c = '!'; c <= '~'; ++c) vocab.tokens.emplace_back(1, c);
  vocab.tokens.emplace_back("\xC4\xA0");  // 'Ġ'
  for (std::string& token : extra_tokens) vocab.tokens.push_back(std::move(token));
  vocab.tokens.emplace_back("<|endoftext|>");
  vocab.token_types.assign(vocab.tokens.size(), model::TokenType::kNormal);
  vocab.token_types.back() = model::TokenType::kControl;
  vocab.eos_id = static_cast<int32_t>(vocab.tokens.size() - 1);
  vocab.add_bos = false;
  return model::Tokenizer::from_vocab(std::move(vocab));
}

}  // namespace troupe::net::testing
