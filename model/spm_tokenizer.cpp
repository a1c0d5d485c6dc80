// SentencePiece-style merging (llama.cpp llm_tokenizer_spm_session): start from UTF-8
// characters and repeatedly merge the adjacent pair whose concatenation is a vocabulary token with
// the highest score (ties: leftmost). Symbols left that are not tokens are emitted as <0xNN> byte
// tokens, one per byte.
#include <cstdio>
#include <queue>
#include <string>

#include "model/tokenizer_internal.hpp"
#include "model/unicode.hpp"

namespace troupe::model {
namespace {

struct Symbol {
  uint32_t offset;
  uint32_t length;
  int32_t prev;
  int32_t next;
};

struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  uint32_t size;  // bytes of the concatenation when queued
};

struct BigramOrder {  // the top is the highest score, then the leftmost
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void spm_build_tables(Tokenizer::Impl& t) {
  t.byte_token_ids.fill(-1);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    int32_t id = t.find(name);
    if (id < 0) {  // llama.cpp falls back to the one-character token
      const char c = static_cast<char>(b);
      id = t.find(std::string_view(&c, 1));
    }
    t.byte_token_ids[b] = id;
  }
}

void spm_encode_fragment(const Tokenizer::Impl& t, std::string_view text,
                         std::vector<int32_t>& out) {
  if (text.empty()) return;
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const size_t len = std::min(text.size() - offset,
                                unicode::utf8_length_from_lead(static_cast<uint8_t>(text[offset])));
    const int32_t index = static_cast<int32_t>(symbols.size());
    offset += len;
    symbols.push_back(Symbol{static_cast<uint32_t>(offset - len), static_cast<uint32_t>(len),
                             index - 1, offset == text.size() ? -1 : index + 1});
  }

  std::vector<Bigram> storage;
  storage.reserve(symbols.size());
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue(BigramOrder{},
                                                                      std::move(storage));
  auto try_add_bigram = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t size = symbols[left].length + symbols[right].length;
    const int32_t id = t.find(text.substr(symbols[left].offset, size));
    if (id < 0) return;
    queue.push(Bigram{t.score(id), left, right, size});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add_bigram(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.size)
      continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add_bigram(left.prev, bigram.left);
    try_add_bigram(bigram.left, left.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const int32_t id = t.find(text.substr(s.offset, s.length));
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (uint32_t k = 0; k < s.length; ++k) {
      const int32_t byte_id = t.byte_token_ids[static_cast<uint8_t>(text[s.offset + k])];
      const int32_t fallback = byte_id >= 0 ? byte_id : t.unk_id;
      if (fallback >= 0) out.push_back(fallback);
    }
  }
}

}  // namespace troupe::model
