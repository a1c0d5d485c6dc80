// One sequence's position in its grammar: which tokens may come next (a bitmask row in
// token_bitmask.hpp's layout), and the state after each sampled token. A thin wrapper over
// xgrammar's GrammarMatcher (a pushdown automaton over the grammar, with rollback).
//
// Life of a constrained sequence (the wiring, issue 19):
//   fill_bitmask(row) before sampling ─► the sampler applies the row (gpu/cpu/token_mask.hpp)
//   accept_token(sampled id)           ─► false only on a bug (a masked sampler never picks a
//                                         disallowed id), or for a token the client forced
//   is_terminated()                    ─► a stop token was accepted: finish_reason "stop"
//   preemption / recompute             ─► reset() then accept the kept tokens again, or
//                                         rollback(n) for the n tokens given back
//   speculative decoding (later)       ─► accept the draft tokens, rollback the rejected ones
//
// NOTE: once the grammar's root rule is complete (is_completed()), the mask allows only the stop
// tokens (TokenizerInfo::stop_token_ids), so the model ends generation there.
//
// Thread-safety: one thread at a time (the sequence's owner); matchers of the same
// CompiledGrammar on different threads are independent.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "model/grammar/grammar_compiler.hpp"

namespace troupe::model::grammar {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(const CompiledGrammar& grammar);
  ~GrammarMatcher();
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  // Advances past token_id when the grammar allows it here; false (state unchanged) when it does
  // not, when the id is special or out of range, or after termination.
  bool accept_token(int32_t token_id);
  // Writes the allowed next tokens into row (exactly tokenizer().bitmask_num_words() words;
  // another size is a bug: std::invalid_argument). Returns false when every token is allowed
  // (the sampler may skip the row). After termination every bit is 0 except the stop tokens'.
  bool fill_bitmask(std::span<uint32_t> row);
  bool is_terminated() const;  // a stop token was accepted
  bool is_completed() const;   // the root rule is matched; only stop tokens may follow
  // Undoes the last num_tokens accepted tokens (a stop token included). False, with nothing
  // undone, when fewer than num_tokens were accepted since the last reset.
  bool rollback(int32_t num_tokens);
  void reset();
  int32_t num_accepted() const { return num_accepted_; }
  const CompiledGrammar& grammar() const { return grammar_; }

 private:
  struct Xgrammar;  // xgrammar::GrammarMatcher
  CompiledGrammar grammar_;
  std::unique_ptr<Xgrammar> xgrammar_;
  int32_t num_accepted_ = 0;
};

}  // namespace troupe::model::grammar
