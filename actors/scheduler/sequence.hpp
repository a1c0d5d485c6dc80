// A request as the scheduler tracks it: token-centric, as in vLLM v1. There is no "prefill
// mode" or "decode mode": num_computed_tokens (KV present) chases num_tokens() (prompt +
// generated), and each step gives a sequence some of the difference.
//
//   token_ids:  [ p0 p1 ... p(n-1) | g0 g1 ... g(k-1) ]
//                 └──── KV computed ────┘ └ next span ┘
//                 num_computed_tokens      num_tokens() = n + k
//
// A sequence samples a token in a step whose span reaches num_tokens(). A preempted sequence
// keeps token_ids (prompt and generated) and restarts with num_computed_tokens = 0 (recompute),
// so its output is the same as if it had never been preempted.
//
// Thread-safety: plain values owned by the Scheduler; one thread at a time (its executor).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/kv_cache/kv_cache_manager.hpp"
#include "actors/messages/priority.hpp"
#include "actors/messages/scheduler_types.hpp"
#include "actors/scheduler/scheduler_config.hpp"
#include "model/sampling_params.hpp"

namespace troupe::scheduler {

enum class SequenceState : uint8_t {
  kWaiting,      // queued, never ran (or ran and was preempted: see num_preemptions)
  kRunning,      // holds KV blocks and is scheduled every step it fits
  kPrefillDone,  // kPrefillOnly role: prompt computed, waiting for take_completed_prefill()
  kAwaitingKv,   // holds blocks that a pull from a prefill server is filling (remote_kv)
};

std::string_view to_string(SequenceState state);

struct Sequence {
  RequestId request_id = 0;
  std::vector<int32_t> token_ids;  // prompt, then generated
  int32_t num_prompt_tokens = 0;
  int32_t num_computed_tokens = 0;
  model::SamplingParams sampling;
  model::StopConditions stop;
  Priority priority = Priority::kNormal;
  std::string client;
  uint64_t arrival_index = 0;  // add order: FCFS within a priority, and the preemption victim
  SequenceState state = SequenceState::kWaiting;
  kv_cache::SequenceBlocks kv;
  bool hold_kv_when_finished = false;
  std::optional<RemoteKvSource> remote_kv;  // reset once pulled, or when the pull failed
  bool recompute_last_prompt_token = false;  // remote KV without a first token
  std::vector<kv_cache::BlockId> pull_destinations;  // kAwaitingKv: the blocks being filled

  // Speculative decoding (scheduler_speculative.cpp). While a step verifies drafts,
  // num_computed_tokens counts them (their KV is being written) and may pass num_tokens();
  // on_step_complete() takes back the rejected ones.
  bool may_draft = true;  // false: grammar-constrained, or its KV is held for a transfer
  std::vector<int32_t> draft_token_ids;  // the drafts of the step in flight
  // Recent accepted / drafted (exponential average). Optimistic at first, so every sequence
  // tries drafts whatever the cost model says; its verifies then set it.
  double draft_acceptance = 1.0;
  int32_t draft_pause_steps = 0;   // decode steps left without drafts (acceptance was low)
  // Drafts the next verify may carry (besides num_speculative_tokens): grows while whole
  // spans are accepted, shrinks on each rejection (scheduler_speculative.cpp).
  int32_t draft_length = kMaxSpeculativeTokens;

  // Prompt outputs (issue 37; NewRequest's fields). num_prompt_outputs: prompt positions whose
  // outputs were reported (a recompute after preemption reports none twice). pooled: kMean's
  // running sum of hidden rows (num_pooled of them), or kLast/kCls's row.
  int32_t prompt_logprobs = -1;
  std::optional<model::Pooling> pooling;
  bool prompt_only = false;
  int32_t num_prompt_outputs = 0;
  std::vector<float> pooled;
  int32_t num_pooled = 0;

  int32_t num_preemptions = 0;
  int32_t num_cached_prompt_tokens = 0;  // prefix-cache hit at first admission
  // Scheduler step counters (no clocks here; the actor stamps wall time on these events).
  uint64_t arrival_step = 0;
  uint64_t first_scheduled_step = 0;  // 0: never scheduled
  uint64_t first_token_step = 0;      // 0: nothing sampled yet
  uint64_t last_scheduled_step = 0;

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_generated_tokens() const { return num_tokens() - num_prompt_tokens; }
  int32_t num_remaining_tokens() const { return num_tokens() - num_computed_tokens; }
  // Every position's output is needed: a prefix-cache hit would skip them.
  bool computes_whole_prompt() const { return prompt_logprobs >= 0 || pooling.has_value(); }
  // An embedding's KV is no decode state: it never enters the prefix cache.
  bool publishes_prefix() const { return !pooling.has_value(); }
};

}  // namespace troupe::scheduler
