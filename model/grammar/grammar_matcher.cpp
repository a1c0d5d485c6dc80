// GrammarMatcher over xgrammar's matcher (see grammar_matcher.hpp).
#include "model/grammar/grammar_matcher.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "model/grammar/xgrammar_impl.hpp"

namespace troupe::model::grammar {

struct GrammarMatcher::Xgrammar {
  xgrammar::GrammarMatcher matcher;
};

GrammarMatcher::GrammarMatcher(const CompiledGrammar& grammar)
    : grammar_(grammar),
      xgrammar_(std::make_unique<Xgrammar>(Xgrammar{
          xgrammar::GrammarMatcher(grammar.impl().compiled, /*override_stop_tokens=*/std::nullopt,
                                   /*terminate_without_stop_token=*/false)})) {}

GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

bool GrammarMatcher::accept_token(int32_t token_id) {
  // Checked here so that xgrammar does not log a warning on stderr for each refusal.
  const TokenizerInfo& tokenizer = grammar_.tokenizer();
  if (is_terminated() || static_cast<size_t>(token_id) >= tokenizer.vocab_size()) return false;
  if (tokenizer.is_special(token_id)) return false;  // stop tokens are not special
  if (!xgrammar_->matcher.AcceptToken(token_id)) return false;
  ++num_accepted_;
  return true;
}

bool GrammarMatcher::fill_bitmask(std::span<uint32_t> row) {
  const size_t num_words = grammar_.tokenizer().bitmask_num_words();
  if (row.size() != num_words) {
    throw std::invalid_argument("GrammarMatcher::fill_bitmask: row of " +
                                std::to_string(row.size()) + " words, want " +
                                std::to_string(num_words));
  }
  if (is_terminated()) {
    // xgrammar refuses to fill after the stop token (an XGRAMMAR_CHECK, i.e. an exception);
    // the documented answer is "only the stop tokens", which ends the sequence again.
    std::fill(row.begin(), row.end(), 0u);
    for (int32_t id : grammar_.tokenizer().stop_token_ids()) {
      if (id >= 0 && static_cast<size_t>(id) / 32 < row.size()) {
        row[static_cast<size_t>(id) / 32] |= 1u << (static_cast<uint32_t>(id) % 32);
      }
    }
    return true;
  }
  int64_t shape[1] = {static_cast<int64_t>(num_words)};
  DLTensor tensor{};
  tensor.data = row.data();
  tensor.device = DLDevice{kDLCPU, 0};  // kDLCUDAHost (pinned) is accepted too
  tensor.ndim = 1;
  tensor.dtype = xgrammar::GetBitmaskDLType();
  tensor.shape = shape;
  tensor.strides = nullptr;
  tensor.byte_offset = 0;
  return xgrammar_->matcher.FillNextTokenBitmask(&tensor);
}

bool GrammarMatcher::is_terminated() const {
  return xgrammar_->matcher.IsTerminated();
}
bool GrammarMatcher::is_completed() const {
  return xgrammar_->matcher.IsCompleted();
}

bool GrammarMatcher::rollback(int32_t num_tokens) {
  if (num_tokens < 0 || num_tokens > num_accepted_) return false;
  if (num_tokens == 0) return true;
  xgrammar_->matcher.Rollback(num_tokens);
  num_accepted_ -= num_tokens;
  return true;
}

void GrammarMatcher::reset() {
  xgrammar_->matcher.Reset();
  num_accepted_ = 0;
}

}  // namespace troupe::model::grammar
