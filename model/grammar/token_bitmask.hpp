// The token bitmask of constrained decoding: which token ids a grammar allows next, one bit per
// id, in xgrammar's layout so a matcher fills it in place and a sampler (CPU or CUDA) reads it
// without conversion:
//
//   row r: words [r * num_words, (r + 1) * num_words),  num_words = ceil(vocab_size / 32)
//   token t allowed  <=>  bit (t % 32) of word (t / 32) is 1      (LSB first, as xgrammar)
//
//   word 0                        word 1
//   bit 0 ... bit 31              bit 0 ... bit 31
//   tok 0 ... tok 31              tok 32 ... tok 63            (bits past vocab_size: 0)
//
// xgrammar declares its bitmask as int32; the bits are the same, we keep them as uint32 so the
// shifts are well defined. The mask lives in model/ (no xgrammar in here) because gpu/ applies it
// and the layering is gpu -> model; only model/grammar/'s matcher needs xgrammar to fill it.
//
// Thread-safety: a TokenBitmask is a plain value; one writer or many readers at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace troupe::model::grammar {

constexpr size_t bitmask_num_words(size_t vocab_size) {
  return (vocab_size + 31) / 32;
}

inline bool token_allowed(std::span<const uint32_t> row, int32_t token_id) {
  if (token_id < 0) return false;
  const size_t word = static_cast<size_t>(token_id) / 32;
  return word < row.size() && ((row[word] >> (static_cast<uint32_t>(token_id) % 32)) & 1u) != 0;
}

// Rows of bits for a batch of constrained sequences (one row per sampled row of the step).
class TokenBitmask {
 public:
  TokenBitmask() = default;
  TokenBitmask(size_t num_rows, size_t vocab_size)
      : vocab_size_(vocab_size),
        num_words_(bitmask_num_words(vocab_size)),
        words_(num_rows * num_words_, ~uint32_t{0}) {}

  size_t num_rows() const { return num_words_ == 0 ? 0 : words_.size() / num_words_; }
  size_t vocab_size() const { return vocab_size_; }
  size_t num_words() const { return num_words_; }

  std::span<uint32_t> row(size_t r) { return {words_.data() + r * num_words_, num_words_}; }
  std::span<const uint32_t> row(size_t r) const {
    return {words_.data() + r * num_words_, num_words_};
  }
  // Every token allowed: the state of an unconstrained row.
  void allow_all(size_t r) {
    for (uint32_t& w : row(r)) w = ~uint32_t{0};
  }
  std::span<const uint32_t> words() const { return words_; }

 private:
  size_t vocab_size_ = 0;
  size_t num_words_ = 0;
  std::vector<uint32_t> words_;
};

}  // namespace troupe::model::grammar
