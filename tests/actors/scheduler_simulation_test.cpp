// Randomized simulation of the scheduler under load: thousands of requests (prompts built from
// a few shared prefixes, random lengths, priorities, ignore_eos/stop ids, four clients of which
// one floods — fair share and the per-client cap — under a step-time budget), random cancels and
// stop-string finishes, a KV pool small enough to force eviction and preemption, and the fake
// model reading every context back through the block tables. Seeded and reproducible.
//
// After every step: the plan respects the token budget and max_num_seqs, no sequence appears
// twice, every structural invariant holds (no block both free and referenced, ref counts equal
// the sequences holding each block, cached blocks hold the tokens the cache says), and the fake
// model saw consistent KV. At the end: every request finished (no starvation), each one that was
// not cut short produced exactly its reference output (preempted or not), and idle means zero
// referenced blocks.
//
// Steps: 100,000 by default; TROUPE_SIM_STEPS overrides it (sanitizer builds use fewer).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>

#include "scheduler_harness.hpp"

namespace troupe::scheduler {
namespace {

using testing::FakeStepModel;
using testing::SchedulerHarness;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int64_t kDefaultSteps = 25'000;
#else
constexpr int64_t kDefaultSteps = 100'000;
#endif

int64_t simulation_steps() {
  if (const char* env = std::getenv("TROUPE_SIM_STEPS")) {
    const long long value = std::atoll(env);
    if (value > 0) return value;
  }
  return kDefaultSteps;
}

SchedulerConfig simulation_config() {
  SchedulerConfig config;
  config.max_num_seqs = 12;
  config.max_num_batched_tokens = 96;
  config.chunked_prefill_size = 40;
  config.max_model_len = 256;
  config.max_queue = 24;
  config.block_size = 8;
  config.num_blocks = 96;  // 768 tokens: far less than 12 sequences can want
  config.eos_token_ids = {2};
  config.fairness = Fairness::kClient;
  config.max_waiting_per_client = 12;
  config.max_step_ms = 20;  // with simulation_machine(): cuts chunks deep in a context
  return config;
}

StepCostModel simulation_machine() {
  return {.fixed_ms = 2, .per_token_ms = 0.2, .per_context_ms = 0.002, .per_sampled_ms = 0.05,
          .usable = true};
}

class Simulation {
 public:
  explicit Simulation(uint32_t seed) : h_(simulation_config(), /*eos_one_in=*/30), rng_(seed) {
    h_.scheduler.set_step_cost_model(simulation_machine());
    for (int i = 0; i < 4; ++i) {
      std::vector<int32_t> prefix;
      const int32_t length = 8 + static_cast<int32_t>(rng_() % 72);
      for (int32_t t = 0; t < length; ++t) prefix.push_back(3 + static_cast<int32_t>(rng_() % 900));
      prefixes_.push_back(prefix);
    }
  }

  void run(int64_t num_steps) {
    // Counts steps that computed something; then arrivals stop and the rest drains.
    int64_t step = 0;
    while (step < num_steps) {
      maybe_add_requests();
      maybe_interrupt();
      if (step_once()) ++step;
      if (::testing::Test::HasFailure()) return;
    }
    int64_t drain_steps = 0;
    while (h_.scheduler.has_unfinished_requests() && drain_steps++ < 100'000) {
      step_once();
      if (::testing::Test::HasFailure()) return;
    }
  }

  void check_outcome() const {
    const auto stats = h_.scheduler.stats();
    EXPECT_FALSE(h_.scheduler.has_unfinished_requests()) << "starvation: requests never finished";
    EXPECT_EQ(stats.kv.num_referenced, 0) << "idle but KV blocks still referenced";
    EXPECT_EQ(stats.num_requests_finished, stats.num_requests_accepted);
    size_t num_checked = 0;
    for (const auto& [id, request] : h_.requests) {
      const auto reason = h_.reasons.find(id);
      ASSERT_NE(reason, h_.reasons.end()) << "request " << id << " never finished";
      if (interrupted_.contains(id)) continue;  // cut short by cancel/finish: output is a prefix
      const auto output = h_.outputs.find(id);
      const std::vector<int32_t> produced =
          output == h_.outputs.end() ? std::vector<int32_t>{} : output->second;
      ASSERT_EQ(produced, h_.expected_output(id)) << "request " << id;
      ++num_checked;
    }
    // The run must actually have exercised the hard paths.
    EXPECT_GT(num_checked, 1000u);
    EXPECT_GT(stats.num_preemptions, 100u);
    EXPECT_GT(stats.kv.prefix.num_evictions, 100u);
    EXPECT_GT(stats.kv.prefix.num_hits, 100u);
    EXPECT_GT(stats.num_requests_refused, 0u);
    EXPECT_GT(interrupted_.size(), 100u);
    EXPECT_GT(stats.num_fairness_preemptions, 10u);
    EXPECT_GT(stats.num_time_budgeted_steps, 100u);
    EXPECT_GT(num_client_refusals_, 0u);
    std::printf("simulation: %llu accepted, %llu refused (%llu by the per-client cap), %zu checked, "
                "%llu preemptions (%llu fair share), %llu budget-cut steps, %llu evictions, "
                "prefix hit rate %.3f, %llu steps\n",
                static_cast<unsigned long long>(stats.num_requests_accepted),
                static_cast<unsigned long long>(stats.num_requests_refused),
                static_cast<unsigned long long>(num_client_refusals_), num_checked,
                static_cast<unsigned long long>(stats.num_preemptions),
                static_cast<unsigned long long>(stats.num_fairness_preemptions),
                static_cast<unsigned long long>(stats.num_time_budgeted_steps),
                static_cast<unsigned long long>(stats.kv.prefix.num_evictions),
                stats.prefix_cache_hit_rate, static_cast<unsigned long long>(stats.num_steps));
  }

 private:
  void maybe_add_requests() {
    const uint32_t roll = rng_() % 100;
    // Mostly a trickle, sometimes a burst that overflows max_queue (back-pressure).
    const int num_new = roll < 70 ? 0 : (roll < 95 ? 1 : (roll < 99 ? 3 : 16));
    for (int i = 0; i < num_new; ++i) {
      std::vector<int32_t> prompt;
      if (rng_() % 4 != 0) prompt = prefixes_[rng_() % prefixes_.size()];
      const int32_t suffix = static_cast<int32_t>(rng_() % 60) + (prompt.empty() ? 1 : 0);
      for (int32_t t = 0; t < suffix; ++t) prompt.push_back(3 + static_cast<int32_t>(rng_() % 900));
      const auto max_tokens = 1 + static_cast<int32_t>(rng_() % 48);
      const auto priority = static_cast<Priority>(rng_() % kNumPriorities);
      const bool ignore_eos = rng_() % 5 == 0;
      // Half the requests come from one client, the rest from three others.
      const uint32_t who = rng_() % 6;
      const std::string client = who < 3 ? "flood" : "client" + std::to_string(who);
      const RequestId id = next_id_++;
      const AddResult result = h_.add(id, std::move(prompt), max_tokens, priority, ignore_eos, client);
      ASSERT_TRUE(result == AddResult::kAccepted || result == AddResult::kQueueFull ||
                  result == AddResult::kClientQueueFull || result == AddResult::kNeverFits)
          << to_string(result);
      if (result == AddResult::kClientQueueFull) ++num_client_refusals_;
      if (result == AddResult::kAccepted) live_.push_back(id);
    }
  }

  // Cancels (client gone) and stop-string finishes, at random times and in any state.
  void maybe_interrupt() {
    if (live_.empty() || rng_() % 40 != 0) return;
    const size_t index = rng_() % live_.size();
    const RequestId id = live_[index];
    live_[index] = live_.back();
    live_.pop_back();
    const auto reason = rng_() % 2 ? FinishReason::kCancelled : FinishReason::kStopString;
    if (const auto finished = h_.scheduler.finish(id, reason)) {
      h_.reasons[id] = finished->reason;
      interrupted_.insert(id);
    }
  }

  // false when nothing was runnable.
  bool step_once() {
    StepPlan plan = h_.scheduler.schedule();
    if (plan.empty()) return false;
    check_plan(plan);
    if (::testing::Test::HasFatalFailure()) return false;
    // Sometimes the client goes away while its step is on the device.
    if (!live_.empty() && rng_() % 50 == 0) {
      const RequestId id = live_[rng_() % live_.size()];
      if (const auto finished = h_.scheduler.cancel(id)) {
        h_.reasons[id] = finished->reason;
        interrupted_.insert(id);
      }
    }
    const gpu::StepResult result = h_.model.run(plan.batch);
    const StepUpdate update = h_.scheduler.on_step_complete(result);
    h_.record(update);
    for (const auto& finished : update.finished) std::erase(live_, finished.request_id);
    EXPECT_EQ(h_.model.error(), "");
    const auto error = h_.scheduler.check_invariants();
    EXPECT_FALSE(error.has_value()) << *error;
    check_cached_contents();
    return !::testing::Test::HasFailure();
  }

  void check_plan(const StepPlan& plan) const {
    const auto& config = h_.scheduler.config();
    ASSERT_LE(plan.batch.num_tokens(), config.max_num_batched_tokens);
    ASSERT_LE(static_cast<int32_t>(plan.batch.seqs.size()), config.max_num_seqs);
    std::set<RequestId> seen;
    int32_t offset = 0;
    for (const auto& slice : plan.batch.seqs) {
      ASSERT_TRUE(seen.insert(slice.seq_id).second) << "sequence scheduled twice";
      ASSERT_EQ(slice.token_offset, offset);
      ASSERT_GT(slice.num_tokens, 0);
      ASSERT_LE(slice.num_tokens, std::max(1, config.chunked_prefill_size));
      offset += slice.num_tokens;
    }
    ASSERT_EQ(offset, plan.batch.num_tokens());
  }

  // Every cached block's KV (as the fake model stored it) holds the tokens the cache claims,
  // at the positions its depth implies: the cache never points at overwritten KV.
  void check_cached_contents() const {
    const auto& kv = h_.scheduler.kv_cache();
    const auto& cache = kv.prefix_cache();
    const int32_t bs = kv.block_size();
    for (kv_cache::BlockId b = 0; b < kv.num_blocks(); ++b) {
      if (!cache.contains(b)) continue;
      int32_t depth = 0;
      for (kv_cache::BlockId p = cache.parent_of(b); p != kv_cache::kNoBlock; p = cache.parent_of(p)) ++depth;
      const auto tokens = cache.tokens_of(b);
      for (int32_t i = 0; i < bs; ++i) {
        ASSERT_EQ(h_.model.stored_token(b, i), tokens[static_cast<size_t>(i)]) << "block " << b;
        ASSERT_EQ(h_.model.stored_position(b, i), depth * bs + i) << "block " << b;
      }
    }
  }

  SchedulerHarness h_;
  std::mt19937 rng_;
  std::vector<std::vector<int32_t>> prefixes_;
  std::vector<RequestId> live_;
  std::set<RequestId> interrupted_;
  RequestId next_id_ = 1;
  uint64_t num_client_refusals_ = 0;
};

TEST(SchedulerSimulationTest, RandomLoadKeepsEveryInvariant) {
  Simulation simulation(/*seed=*/20240603);
  simulation.run(simulation_steps());
  if (HasFailure()) return;
  simulation.check_outcome();
}

}  // namespace
}  // namespace troupe::scheduler
