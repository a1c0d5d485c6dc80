// Byte-level BPE merging (llama.cpp llm_tokenizer_bpe_session): per pre-token, start from one
// symbol per UTF-8 character of the mapped text and repeatedly merge the adjacent pair with the
// lowest merge rank (ties: leftmost) through a priority queue of candidate pairs, so a piece of n
// characters costs O(n log n), not O(n^2).
#include <queue>
#include <stdexcept>
#include <string>

#include "model/tokenizer_internal.hpp"
#include "model/unicode.hpp"

namespace troupe::model {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct Symbol {
  uint32_t offset;  // into the word
  uint32_t length;  // bytes; 0 once merged into its left neighbour
  int32_t id;       // symbol id of the text, -1 when no token or merge knows it
  int32_t prev;
  int32_t next;
};

struct Bigram {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t left_id;
  int32_t right_id;
  int32_t result_id;
};

struct BigramOrder {  // the top of the queue is the lowest rank, then the leftmost
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

int32_t intern(Tokenizer::Impl& t, std::string_view text, int32_t& next_virtual) {
  if (const int32_t id = t.symbol_id(text); id >= 0) return id;
  const int32_t id = next_virtual++;
  t.virtual_symbol_ids.emplace(std::string(text), id);
  return id;
}

}  // namespace

void bpe_build_tables(Tokenizer::Impl& t) {
  int32_t next_virtual = static_cast<int32_t>(t.vocab.tokens.size());
  t.merges.reserve(t.vocab.merges.size());
  std::string joined;
  for (size_t rank = 0; rank < t.vocab.merges.size(); ++rank) {
    const std::string& m = t.vocab.merges[rank];
    const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (space == std::string::npos) continue;  // llama.cpp files it under ("", ""): never matches
    const std::string_view left(m.data(), space);
    const std::string_view right(m.data() + space + 1, m.size() - space - 1);
    if (left.empty() || right.empty()) continue;
    const int32_t left_id = intern(t, left, next_virtual);
    const int32_t right_id = intern(t, right, next_virtual);
    joined.assign(left).append(right);
    const int32_t result_id = intern(t, joined, next_virtual);
    // The first occurrence of a pair keeps its rank (std::map::emplace in llama.cpp).
    t.merges.emplace(pair_key(left_id, right_id), BpeMerge{static_cast<int32_t>(rank), result_id});
  }
  t.single_byte_ids.fill(-1);
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    t.single_byte_ids[b] = t.find(std::string_view(&c, 1));
  }
}

void bpe_encode_piece(const Tokenizer::Impl& t, std::string_view word, std::vector<int32_t>& out) {
  if (word.empty()) return;
  const int32_t num_tokens = static_cast<int32_t>(t.vocab.tokens.size());
  if (t.ignore_merges) {
    const int32_t whole = t.find(word);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }

  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t offset = 0; offset < word.size();) {
    const size_t len = std::min(word.size() - offset,
                                unicode::utf8_length_from_lead(static_cast<uint8_t>(word[offset])));
    const int32_t id = t.symbol_id(word.substr(offset, len));
    const int32_t index = static_cast<int32_t>(symbols.size());
    offset += len;
    symbols.push_back(Symbol{static_cast<uint32_t>(offset - len), static_cast<uint32_t>(len), id,
                             index - 1, offset == word.size() ? -1 : index + 1});
  }

  std::vector<Bigram> storage;
  storage.reserve(symbols.size());
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue(BigramOrder{},
                                                                      std::move(storage));
  auto add_bigram = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t left_id = symbols[left].id;
    const int32_t right_id = symbols[right].id;
    if (left_id < 0 || right_id < 0) return;
    const auto it = t.merges.find(pair_key(left_id, right_id));
    if (it == t.merges.end()) return;
    queue.push(Bigram{it->second.rank, left, right, left_id, right_id, it->second.result_id});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) add_bigram(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Outdated: one side was merged away or grew since this pair was queued.
    if (left.length == 0 || right.length == 0 || left.id != bigram.left_id ||
        right.id != bigram.right_id || left.next != bigram.right) {
      continue;
    }
    left.length += right.length;
    left.id = bigram.result_id;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    add_bigram(left.prev, bigram.left);
    add_bigram(bigram.left, left.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.id >= 0 && s.id < num_tokens) {
      out.push_back(s.id);
      continue;
    }
    // Not a token: llama.cpp emits the symbol's bytes that are one-byte tokens and drops the rest.
    for (uint32_t k = 0; k < s.length; ++k) {
      const int32_t id = t.single_byte_ids[static_cast<uint8_t>(word[s.offset + k])];
      if (id >= 0) out.push_back(id);
    }
  }
}

}  // namespace troupe::model
