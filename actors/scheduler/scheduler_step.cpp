// Scheduler: turning a planned step into the flattened gpu::StepBatch, and consuming the
// step's sampled tokens (append, stop checks, caching newly full blocks).
#include <algorithm>
#include <optional>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "actors/scheduler/scheduler.hpp"
#include "actors/scheduler/stop_checker.hpp"

namespace troupe::scheduler {
namespace {

bool uses_penalties(const model::SamplingParams& params) {
  return params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f ||
         params.frequency_penalty != 0.0f;
}

// The ids min_tokens holds back, in the stop checker's terms: the model's end-of-generation ids
// unless ignore_eos (which turns off only those), and the request's stop_token_ids.
std::vector<int32_t> end_token_ids(const Sequence& seq, std::span<const int32_t> eos_token_ids) {
  std::vector<int32_t> ids;
  if (!seq.stop.ignore_eos) ids.assign(eos_token_ids.begin(), eos_token_ids.end());
  ids.insert(ids.end(), seq.stop.stop_token_ids.begin(), seq.stop.stop_token_ids.end());
  return ids;
}


// kMean: the sum over the positions divided by their count (llama.cpp's mean pooling, up to
// the rounding of its 1/n-weighted sum); kLast, kCls: the row itself.
std::vector<float> pooled_embedding(const Sequence& seq) {
  std::vector<float> values = seq.pooled;
  if (seq.pooling == model::Pooling::kMean && seq.num_pooled > 0) {
    for (float& v : values) v /= static_cast<float>(seq.num_pooled);
  }
  return values;
}

}  // namespace

StepPlan Scheduler::build_plan(Draft& draft) {
  StepPlan plan;
  plan.preempted = std::move(draft.preempted);
  if (draft.entries.empty()) {
    last_step_num_tokens_ = 0;
    last_step_num_seqs_ = 0;
    return plan;
  }
  plan.batch.kv_blocks_from_host = std::exchange(kv_blocks_from_host_, {});
  // Before the loop below advances num_computed_tokens, which the shape is measured from.
  plan.shape = shape_of(draft);
  if (step_cost_.usable) plan.predicted_ms = step_cost_.predict_ms(plan.shape);
  plan.time_budgeted = draft.time_cut;
  if (draft.time_cut) ++num_time_budgeted_steps_;
  const uint64_t step_id = ++num_steps_;
  if (draft.first_tokens_only) {
    ++num_first_token_steps_;
    last_first_token_step_ = step_id;
  }
  gpu::StepBatch& batch = plan.batch;
  batch.step_id = step_id;
  size_t num_tokens = 0;
  size_t max_blocks = 0;
  for (const Scheduled& entry : draft.entries) {
    num_tokens += static_cast<size_t>(entry.num_tokens);
    max_blocks = std::max(max_blocks, entry.seq->kv.blocks.size());
  }
  batch.token_ids.reserve(num_tokens);
  batch.positions.reserve(num_tokens);
  batch.seqs.reserve(draft.entries.size());
  batch.sampling.reserve(draft.entries.size());
  batch.max_blocks_per_seq = static_cast<int32_t>(max_blocks);
  batch.num_kv_groups = config_.num_kv_groups;
  batch.block_tables.assign(static_cast<size_t>(config_.num_kv_groups) * draft.entries.size() * max_blocks,
                            kv_cache::kNoBlock);

  InFlightStep flight;
  flight.step_id = step_id;
  flight.interruptible = plan.interruptible = interruptible(draft, step_id);
  flight.entries.reserve(draft.entries.size());
  for (size_t row = 0; row < draft.entries.size(); ++row) {
    const Scheduled& entry = draft.entries[row];
    append_slice(plan, entry, static_cast<int32_t>(row), draft.entries.size());
    // Token-centric bookkeeping happens at planning time, as in vLLM v1: the KV of the span
    // counts as computed from here on (the step is committed to run).
    entry.seq->num_computed_tokens += entry.num_tokens;
    flight.entries.push_back(
        {entry.seq->request_id, batch.seqs.back().sample, entry.num_tokens, entry.num_draft_tokens});
  }
  in_flight_ = std::move(flight);
  last_step_num_tokens_ = static_cast<int32_t>(num_tokens);
  last_step_num_seqs_ = static_cast<int32_t>(draft.entries.size());
  return plan;
}

void Scheduler::append_slice(StepPlan& plan, const Scheduled& entry, int32_t row,
                             size_t num_rows) {
  gpu::StepBatch& batch = plan.batch;
  const Sequence& seq = *entry.seq;
  const int32_t begin = seq.num_computed_tokens;
  const int32_t end = begin + entry.num_tokens;
  const int32_t end_of_known = end - entry.num_draft_tokens;  // drafts follow the known tokens

  gpu::SequenceSlice slice;
  slice.seq_id = seq.request_id;
  slice.token_offset = batch.num_tokens();
  slice.num_tokens = entry.num_tokens;
  slice.context_len = end;
  slice.block_table_row = row;
  slice.sample = end_of_known == seq.num_tokens() && !seq.prompt_only;
  slice.num_prompt_tokens = seq.num_prompt_tokens;
  if (seq.computes_whole_prompt()) add_prompt_outputs(batch, seq, begin, end, slice);
  slice.num_draft_tokens = entry.num_draft_tokens;
  const auto drafts = std::span<const int32_t>(seq.draft_token_ids).first(
      static_cast<size_t>(entry.num_draft_tokens));

  batch.token_ids.insert(batch.token_ids.end(), seq.token_ids.begin() + begin,
                         seq.token_ids.begin() + end_of_known);
  batch.token_ids.insert(batch.token_ids.end(), drafts.begin(), drafts.end());
  for (int32_t position = begin; position < end; ++position) batch.positions.push_back(position);
  // [group][row][block]: group 0 is `blocks`, the sliding groups follow (kNoBlock where freed).
  const size_t width = static_cast<size_t>(batch.max_blocks_per_seq);
  const auto row_at = [&](size_t group) {
    return batch.block_tables.begin() +
           static_cast<ptrdiff_t>((group * num_rows + static_cast<size_t>(row)) * width);
  };
  std::copy(seq.kv.blocks.begin(), seq.kv.blocks.end(), row_at(0));
  for (size_t g = 0; g < seq.kv.sliding.size(); ++g) {
    std::copy(seq.kv.sliding[g].begin(), seq.kv.sliding[g].end(), row_at(g + 1));
  }

  if (slice.sample) {
    slice.sampling_index = static_cast<int32_t>(batch.sampling.size());
    gpu::SamplingSlot slot;
    slot.params = seq.sampling;
    slot.num_generated = seq.num_generated_tokens();
    if (slot.num_generated < seq.sampling.min_tokens) {
      slot.end_token_ids = end_token_ids(seq, config_.eos_token_ids);
    }
    if (uses_penalties(seq.sampling) && seq.sampling.penalty_last_n != 0) {
      // penalty_last_n < 0 means the whole sequence (llama.cpp's -1).
      const int32_t window = seq.sampling.penalty_last_n < 0
                                 ? seq.num_tokens()
                                 : std::min(seq.sampling.penalty_last_n, seq.num_tokens());
      slot.recent_offset = static_cast<int32_t>(batch.recent_tokens.size());
      slot.recent_count = window;
      batch.recent_tokens.insert(batch.recent_tokens.end(), seq.token_ids.end() - window,
                                 seq.token_ids.end());
      // The positions after draft i penalize it as generated (gpu/step.hpp).
      batch.recent_tokens.insert(batch.recent_tokens.end(), drafts.begin(), drafts.end());
    }
    batch.sampling.push_back(std::move(slot));
  }
  if (slice.sample && slice.num_tokens - slice.num_draft_tokens == 1) {
    plan.num_decode_tokens += slice.num_tokens;  // a decode, or a decode and its drafts
  } else {
    plan.num_prefill_tokens += slice.num_tokens;
  }
  batch.seqs.push_back(slice);
}

// Outputs only for prompt positions not reported yet: a span recomputed after a preemption
// asks for none twice.
void Scheduler::add_prompt_outputs(gpu::StepBatch& batch, const Sequence& seq, int32_t begin,
                                   int32_t end, gpu::SequenceSlice& slice) const {
  const int32_t from = std::max(begin, seq.num_prompt_outputs);
  if (seq.prompt_logprobs >= 0) {
    // Position p scores prompt token p + 1; the last prompt position predicts a generated token,
    // whose logprob comes with its sample.
    const int32_t scored_end = std::min(end, seq.num_prompt_tokens - 1);
    if (scored_end > from) {
      slice.scored_begin = from;
      slice.num_scored = scored_end - from;
      slice.score_offset = static_cast<int32_t>(batch.score_targets.size());
      slice.score_top_n = seq.prompt_logprobs;
      batch.score_targets.insert(batch.score_targets.end(), seq.token_ids.begin() + from + 1,
                                 seq.token_ids.begin() + scored_end + 1);
    }
  }
  if (!seq.pooling) return;
  const int32_t prompt_end = std::min(end, seq.num_prompt_tokens);
  int32_t first = from;
  int32_t last = prompt_end;  // exclusive
  if (*seq.pooling == model::Pooling::kLast) first = seq.num_prompt_tokens - 1;
  if (*seq.pooling == model::Pooling::kCls) last = 1;
  first = std::max(first, from);
  last = std::min(last, prompt_end);
  if (last > first) {
    slice.hidden_begin = first;
    slice.num_hidden = last - first;
  }
}

// The step's prompt outputs for `seq`: scores go out as they are, hidden rows are pooled; a
// prompt-only sequence whose prompt is now computed finishes with its embedding.
void Scheduler::take_prompt_outputs(StepUpdate& update, Sequence& seq, const gpu::StepResult& result) {
  for (const gpu::PromptScores& scores : result.scores) {
    if (scores.seq_id != seq.request_id) continue;
    update.prompt_logprobs.push_back({seq.request_id, scores.first_position, scores.tokens});
  }
  for (const gpu::HiddenRows& rows : result.hidden) {
    if (rows.seq_id != seq.request_id || !seq.pooling) continue;
    const auto width = static_cast<size_t>(rows.width);
    for (int32_t r = 0; r < rows.num_rows(); ++r) {
      const float* row = rows.values.data() + static_cast<size_t>(r) * width;
      if (*seq.pooling == model::Pooling::kMean && !seq.pooled.empty()) {
        // In position order, one row at a time: the sum does not depend on the chunking.
        for (size_t j = 0; j < width; ++j) seq.pooled[j] += row[j];
      } else {
        seq.pooled.assign(row, row + width);
      }
      ++seq.num_pooled;
    }
  }
  seq.num_prompt_outputs = std::max(seq.num_prompt_outputs,
                                    std::min(seq.num_computed_tokens, seq.num_prompt_tokens));
}

std::span<const gpu::SampledToken> Scheduler::find_sampled(const gpu::StepResult& result,
                                                          size_t& cursor, RequestId request_id,
                                                          int32_t num_draft_tokens) const {
  // Tokens come in StepBatch::seqs order; fall back to a search if a backend reorders them.
  const auto& tokens = result.tokens;
  size_t first = cursor;
  if (first >= tokens.size() || tokens[first].seq_id != request_id) {
    const auto it = std::find_if(tokens.begin(), tokens.end(),
                                 [request_id](const gpu::SampledToken& t) { return t.seq_id == request_id; });
    if (it == tokens.end()) return {};
    first = static_cast<size_t>(it - tokens.begin());
  }
  size_t count = 1;
  while (count < static_cast<size_t>(1 + num_draft_tokens) && first + count < tokens.size() &&
         tokens[first + count].seq_id == request_id) {
    ++count;
  }
  if (first == cursor) cursor += count;
  return {tokens.data() + first, count};
}

StepUpdate Scheduler::on_step_complete(const gpu::StepResult& result) {
  if (!in_flight_) throw std::logic_error("on_step_complete() with no step in flight");
  if (result.step_id != in_flight_->step_id) {
    throw std::logic_error(fmt::format("on_step_complete() for step {}, but step {} is in flight",
                                       result.step_id, in_flight_->step_id));
  }
  const InFlightStep flight = std::move(*in_flight_);
  in_flight_.reset();
  StepUpdate update;
  update.step_id = flight.step_id;
  update.tokens.reserve(result.tokens.size());
  size_t cursor = 0;
  for (const InFlightEntry& entry : flight.entries) {
    const std::span<const gpu::SampledToken> sampled =
        entry.samples ? find_sampled(result, cursor, entry.request_id, entry.num_draft_tokens)
                      : std::span<const gpu::SampledToken>{};
    const auto it = sequences_.find(entry.request_id);
    // Cancelled or finished while the step ran (or the id was reused since): drop its token.
    if (it == sequences_.end()) continue;
    Sequence& seq = *it->second;
    if (seq.state != SequenceState::kRunning || seq.last_scheduled_step != flight.step_id) continue;
    if (entry.samples && sampled.empty()) {
      throw std::logic_error(fmt::format("step {} result has no token for request {}",
                                         flight.step_id, entry.request_id));
    }
    if (seq.computes_whole_prompt()) take_prompt_outputs(update, seq, result);
    complete_sequence(update, seq, sampled, entry.num_draft_tokens, flight.step_id);
  }
  return update;
}

void Scheduler::on_step_interrupted(uint64_t step_id) {
  if (!in_flight_ || in_flight_->step_id != step_id) {
    throw std::logic_error(fmt::format("on_step_interrupted() for step {}, which is not in flight", step_id));
  }
  const InFlightStep flight = std::move(*in_flight_);
  in_flight_.reset();
  ++num_interrupted_steps_;
  last_interrupted_step_ = step_id;
  for (const InFlightEntry& entry : flight.entries) {
    const auto it = sequences_.find(entry.request_id);
    if (it == sequences_.end()) continue;  // ended while the step ran: its KV is gone with it
    Sequence& seq = *it->second;
    if (seq.state != SequenceState::kRunning || seq.last_scheduled_step != flight.step_id) continue;
    // Planning counted the span as computed (build_plan()); it is not. Its drafts are proposed
    // afresh by the next plan.
    seq.num_computed_tokens -= entry.num_tokens;
  }
}

void Scheduler::complete_sequence(StepUpdate& update, Sequence& seq,
                                  std::span<const gpu::SampledToken> sampled,
                                  int32_t num_draft_tokens, uint64_t step_id) {
  if (sampled.empty()) {
    // A prefill chunk: its KV now exists, so every block it filled goes to the prefix cache;
    // sliding-window groups give back the pages the next token's window no longer reaches.
    if (seq.publishes_prefix()) kv().cache_full_blocks(seq.kv, seq.token_ids, seq.num_computed_tokens);
    kv().release_out_of_window(seq.kv, seq.num_computed_tokens);
    if (seq.prompt_only && seq.num_computed_tokens >= seq.num_prompt_tokens) {
      if (seq.pooling) update.embeddings.push_back({seq.request_id, pooled_embedding(seq)});
      update.finished.push_back(retire(seq, FinishReason::kPromptDone));
    }
    return;
  }
  // Verify span: the backend kept draft i only if its own sample there equals it.
  const auto num_accepted = static_cast<int32_t>(sampled.size()) - 1;
  for (int32_t i = 0; i < num_accepted; ++i) {
    if (sampled[static_cast<size_t>(i)].token_id != seq.draft_token_ids[static_cast<size_t>(i)]) {
      throw std::logic_error(fmt::format("step {}: request {} kept draft {} but sampled another token",
                                         step_id, seq.request_id, i));
    }
  }
  // The KV of rejected drafts is garbage: those positions count as not computed again.
  seq.num_computed_tokens -= num_draft_tokens - num_accepted;
  settle_drafts(seq, num_draft_tokens, num_accepted);
  // Once the drafts are settled the next position is known: the sliding groups' pages before
  // its window go back.
  kv().release_out_of_window(seq.kv, seq.num_computed_tokens);
  std::optional<FinishReason> reason;
  for (const gpu::SampledToken& token : sampled) {
    seq.token_ids.push_back(token.token_id);
    ++num_generated_tokens_;
    if (seq.first_token_step == 0) seq.first_token_step = step_id;
    update.tokens.push_back(GeneratedToken{seq.request_id, token.token_id, token.logprob,
                                           token.top_logprobs, seq.num_generated_tokens()});
    // A stop inside an accepted run ends the sequence there: what follows is dropped.
    reason = check_stop_after_min_tokens(seq, config_.eos_token_ids, config_.max_model_len);
    if (reason) break;
  }
  // Publish every block the span filled with kept tokens, before the sequence may finish (so
  // the blocks outlive it as evictable cache). Only positions below both counts hold the KV of
  // the tokens now in token_ids; a rejected draft's never reaches the cache.
  kv().cache_full_blocks(seq.kv, seq.token_ids,
                         std::min(seq.num_computed_tokens, seq.num_tokens()));
  if (reason) {
    update.finished.push_back(retire(seq, *reason));
    return;
  }
  // Blocks only rejected drafts needed go back now (the next step allocates what it needs).
  kv().release_tail(seq.kv, seq.num_computed_tokens);
  if (config_.role == SchedulerRole::kPrefillOnly) {
    erase_running(&seq);
    seq.state = SequenceState::kPrefillDone;
    prefill_done_.push_back(&seq);
    update.prefill_completed.push_back(seq.request_id);
  }
}

}  // namespace troupe::scheduler
