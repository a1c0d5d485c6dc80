// SchedulerConfig validation.
#include "actors/scheduler/scheduler_config.hpp"

#include "model/enum_names.hpp"

#include <fmt/format.h>

namespace troupe::scheduler {

std::optional<std::string> validate(const SchedulerConfig& config) {
  if (config.max_num_seqs <= 0) return std::string("max_num_seqs must be positive");
  if (config.max_num_batched_tokens < config.max_num_seqs) {
    // Otherwise some decoding sequences could get no token in a full step and stall.
    return fmt::format("max_num_batched_tokens ({}) must be >= max_num_seqs ({})",
                       config.max_num_batched_tokens, config.max_num_seqs);
  }
  if (config.chunked_prefill_size < 0) return std::string("chunked_prefill_size must be >= 0");
  if (config.max_model_len < 2) return std::string("max_model_len must be at least 2");
  if (config.max_queue < 0) return std::string("max_queue must be >= 0");
  if (config.block_size <= 0) return std::string("block_size must be positive");
  if (config.num_blocks <= 0) return std::string("num_blocks must be positive");
  if (config.max_waiting_per_client < 0) return std::string("max_waiting_per_client must be >= 0");
  if (!(config.max_step_ms >= 0)) return std::string("max_step_ms must be >= 0");
  const SpeculativeConfig& spec = config.speculative;
  if (spec.method != SpeculativeMethod::kNone) {
    if (spec.num_speculative_tokens < 1 || spec.num_speculative_tokens > kMaxSpeculativeTokens) {
      return fmt::format("speculative.num_speculative_tokens must be in [1, {}]",
                         kMaxSpeculativeTokens);
    }
    if (spec.prompt_lookup_min < 1) return std::string("speculative.prompt_lookup_min must be >= 1");
    if (spec.disable_by_batch_size < 0) {
      return std::string("speculative.disable_by_batch_size must be >= 0");
    }
    if (spec.prompt_lookup_max < spec.prompt_lookup_min) {
      return std::string("speculative.prompt_lookup_max must be >= prompt_lookup_min");
    }
  }
  for (int32_t id : config.eos_token_ids) {
    if (id < 0) return fmt::format("eos token id {} is negative", id);
  }
  return std::nullopt;
}

constexpr EnumNames<SchedulerRole, 2> kSchedulerRoleNames{{{
    {SchedulerRole::kPrefillAndDecode, "prefill_and_decode"},
    {SchedulerRole::kPrefillOnly, "prefill_only"}}}};
static_assert(kSchedulerRoleNames.dense());

std::string_view to_string(SchedulerRole role) { return kSchedulerRoleNames.name(role); }

constexpr EnumNames<Fairness, 2> kFairnessNames{{{
    {Fairness::kFifo, "fifo"}, {Fairness::kClient, "client"}}}};
static_assert(kFairnessNames.dense());

std::string_view to_string(Fairness fairness) { return kFairnessNames.name(fairness); }

constexpr EnumNames<SpeculativeMethod, 2> kSpeculativeMethodNames{{{
    {SpeculativeMethod::kNone, "none"}, {SpeculativeMethod::kNgram, "ngram"}}}};
static_assert(kSpeculativeMethodNames.dense());

std::string_view to_string(SpeculativeMethod method) { return kSpeculativeMethodNames.name(method); }

std::optional<SpeculativeMethod> parse_speculative_method(std::string_view text) { return kSpeculativeMethodNames.parse(text); }

std::optional<Fairness> parse_fairness(std::string_view text) { return kFairnessNames.parse(text); }

}  // namespace troupe::scheduler
