// Grammar matchers of the running constrained sequences (see structured_output.hpp).
#include "actors/scheduler/structured_output.hpp"

#include <algorithm>
#include <span>
#include <stdexcept>

#ifdef TROUPE_HAVE_XGRAMMAR
#include "model/grammar/grammar_matcher.hpp"
#endif

namespace troupe::scheduler {

#ifdef TROUPE_HAVE_XGRAMMAR

StructuredOutput::StructuredOutput() = default;
StructuredOutput::~StructuredOutput() = default;

void StructuredOutput::add(RequestId request_id,
                           const std::shared_ptr<const model::grammar::CompiledGrammar>& grammar) {
  if (!grammar) return;
  matchers_[request_id] = std::make_shared<model::grammar::GrammarMatcher>(*grammar);
}

void StructuredOutput::remove(RequestId request_id) {
  matchers_.erase(request_id);
  broken_.erase(request_id);
}

int32_t StructuredOutput::fill_bitmasks(gpu::StepBatch& batch) {
  if (matchers_.empty()) return 0;
  int32_t num_rows = 0;
  for (const gpu::SequenceSlice& slice : batch.seqs) {
    if (!slice.sample || slice.sampling_index < 0) continue;
    auto it = matchers_.find(slice.seq_id);
    if (it == matchers_.end()) continue;
    model::grammar::GrammarMatcher& matcher = *it->second;
    const auto num_words = static_cast<int32_t>(matcher.grammar().tokenizer().bitmask_num_words());
    if (batch.bitmask_num_words == 0) batch.bitmask_num_words = num_words;
    if (batch.bitmask_num_words != num_words) {
      throw std::logic_error("structured output: grammars of two vocabularies in one step");
    }
    batch.token_bitmask.resize(static_cast<size_t>(num_rows + 1) * num_words);
    const std::span<uint32_t> row(batch.token_bitmask.data() + static_cast<size_t>(num_rows) * num_words,
                                  static_cast<size_t>(num_words));
    // false: every token is allowed here; the slot stays unconstrained and the row is reused.
    // NOTE: an xgrammar failure must never reach the actor (it would stop the scheduler): the
    // row then allows nothing but the end, and accept() ends the sequence.
    bool constrained = true;
    try {
      constrained = matcher.fill_bitmask(row);
    } catch (const std::exception&) {
      broken_.insert(slice.seq_id);
      std::fill(row.begin(), row.end(), 0u);
      for (int32_t id : matcher.grammar().tokenizer().stop_token_ids()) {
        if (id >= 0 && static_cast<size_t>(id) / 32 < row.size()) {
          row[static_cast<size_t>(id) / 32] |= 1u << (static_cast<uint32_t>(id) % 32);
        }
      }
    }
    if (!constrained) continue;
    batch.sampling[static_cast<size_t>(slice.sampling_index)].bitmask_row = num_rows++;
  }
  batch.token_bitmask.resize(static_cast<size_t>(num_rows) * batch.bitmask_num_words);
  if (num_rows == 0) batch.bitmask_num_words = 0;
  return num_rows;
}

StructuredOutput::Ended StructuredOutput::accept(const std::vector<GeneratedToken>& tokens) {
  Ended ended;
  if (matchers_.empty()) return ended;
  for (const GeneratedToken& token : tokens) {
    auto it = matchers_.find(token.request_id);
    if (it == matchers_.end()) continue;
    model::grammar::GrammarMatcher& matcher = *it->second;
    bool accepted = false;
    try {
      accepted = broken_.count(token.request_id) == 0 && matcher.accept_token(token.token_id);
    } catch (const std::exception&) {
      accepted = false;
    }
    if (!accepted) {
      ended.refused.push_back(token.request_id);
    } else if (matcher.is_terminated()) {
      ended.grammar_ended.push_back(token.request_id);
    }
  }
  return ended;
}

#else  // no xgrammar: PromptBuilder refuses every constrained request, so none gets here

StructuredOutput::StructuredOutput() = default;
StructuredOutput::~StructuredOutput() = default;

void StructuredOutput::add(RequestId /*request_id*/,
                           const std::shared_ptr<const model::grammar::CompiledGrammar>& grammar) {
  if (grammar) throw std::logic_error("structured output: a grammar without xgrammar built in");
}
void StructuredOutput::remove(RequestId request_id) { matchers_.erase(request_id); }
int32_t StructuredOutput::fill_bitmasks(gpu::StepBatch& /*batch*/) { return 0; }
StructuredOutput::Ended StructuredOutput::accept(const std::vector<GeneratedToken>& /*tokens*/) {
  return {};
}

#endif

}  // namespace troupe::scheduler
