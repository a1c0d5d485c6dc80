// Structured output in the step loop (issue 19): one grammar matcher per constrained sequence,
// owned where the sampled tokens come back (the scheduler actor), so the pure Scheduler policy
// never sees a grammar.
//
//   admission ──add(id, grammar)──► matcher (one per sequence; n choices: one each, same grammar)
//   before a step: fill_bitmasks(batch) ─► a bitmask row per constrained sampling slot
//                                          (SamplingSlot::bitmask_row; -1 where the grammar
//                                          allows every token right now, e.g. inside a string)
//   after the step: accept(tokens) ─► each sampled token advances its matcher; the sequences
//                                     whose grammar ended (a stop token accepted) or, a bug,
//                                     refused a token come back to be finished (kGrammarEnd);
//                                     so does one whose matcher threw (its row then allowed
//                                     only the end tokens): xgrammar never stops the actor
//   finished / cancelled ─► remove(id)
//
// NOTE: preemption needs nothing here. A preempted sequence keeps its generated tokens and is
// recomputed up to them, so the matcher (which has accepted exactly those tokens) stays valid;
// the next token it samples is masked from the same state. Prefix caching changes which KV is
// recomputed, never which tokens were generated, so it is unaffected too.
// NOTE: the EOS a grammar allows at its end is a normal end: the policy already finishes it
// (kEos); with ignore_eos it does not, and the terminated matcher finishes it (kGrammarEnd,
// "stop" too): nothing can follow a grammar's end.
//
// Thread-safety: one thread (the scheduler actor's executor). No clocks: the actor times
// fill_bitmasks() (the mask cost per step, EngineStats::structured_output).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "actors/messages/scheduler_types.hpp"
#include "gpu/step.hpp"

namespace troupe::model::grammar {
class CompiledGrammar;
class GrammarMatcher;
}  // namespace troupe::model::grammar

namespace troupe::scheduler {

class StructuredOutput {
 public:
  StructuredOutput();
  ~StructuredOutput();
  StructuredOutput(const StructuredOutput&) = delete;
  StructuredOutput& operator=(const StructuredOutput&) = delete;

  void add(RequestId request_id, const std::shared_ptr<const model::grammar::CompiledGrammar>& grammar);
  void remove(RequestId request_id);
  bool constrains(RequestId request_id) const { return matchers_.count(request_id) != 0; }
  size_t num_sequences() const { return matchers_.size(); }

  // Writes the bitmask rows of the batch's constrained sampling slots (token_bitmask,
  // bitmask_num_words, bitmask_row). Returns the number of rows written (0: the batch is
  // untouched).
  int32_t fill_bitmasks(gpu::StepBatch& batch);

  struct Ended {
    std::vector<RequestId> grammar_ended;  // a stop token was accepted
    std::vector<RequestId> refused;        // the matcher refused a sampled token (a bug)
  };
  Ended accept(const std::vector<GeneratedToken>& tokens);

 private:
  // shared_ptr, not unique_ptr: its deleter is made where GrammarMatcher is complete, so a build
  // without xgrammar never needs its destructor.
  std::unordered_map<RequestId, std::shared_ptr<model::grammar::GrammarMatcher>> matchers_;
  // Matchers xgrammar failed on (an exception in fill): their next token ends them (refused).
  std::unordered_set<RequestId> broken_;
};

}  // namespace troupe::scheduler
