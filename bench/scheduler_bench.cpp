// Scheduler policy cost per step, without any model: schedule() builds the flattened StepBatch
// (tokens, positions, 256 block-table rows), on_step_complete() appends the sampled tokens,
// checks stops and caches newly full blocks. Sampled tokens come from a constant stub, which
// is fine here: this measures the policy, not a model (troupe's end-to-end benchmarks always
// run a real one).
//
//   BM_DecodeStep/256    256 sequences decoding, contexts 1536 -> 2560 over the run (avg 2k)
//   BM_ChurnStep/256     the same, but ~1 sequence finishes per step and a new one (2k prompt
//                        sharing a 1k cached system prompt) takes its slot: admission, prefix
//                        match, chunked prefill and block release are in the loop too
//
// Reported time is per step (one schedule() + one on_step_complete()).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "actors/scheduler/scheduler.hpp"

namespace troupe::scheduler {
namespace {

constexpr int32_t kPromptTokens = 1536;
constexpr int32_t kSteps = 1024;

SchedulerConfig bench_config(int32_t num_seqs) {
  SchedulerConfig config;
  config.max_num_seqs = num_seqs;
  config.max_num_batched_tokens = 8192;
  config.chunked_prefill_size = 2048;
  config.max_model_len = 8192;
  config.max_queue = 4096;
  config.block_size = 16;
  config.num_blocks = num_seqs * (kPromptTokens + kSteps + 64) / 16 + 1024;
  config.eos_token_ids = {2};
  return config;
}

std::vector<int32_t> prompt_for(uint64_t id, int32_t shared_prefix) {
  std::vector<int32_t> tokens;
  tokens.reserve(kPromptTokens);
  for (int32_t i = 0; i < kPromptTokens; ++i) {
    const bool shared = i < shared_prefix;
    tokens.push_back(static_cast<int32_t>(shared ? 1000 + i : (id * 7919 + static_cast<uint64_t>(i) * 31) % 30000 + 3));
  }
  return tokens;
}

NewRequest request_for(uint64_t id, int32_t max_tokens, int32_t shared_prefix) {
  NewRequest request;
  request.request_id = id;
  request.prompt_token_ids = prompt_for(id, shared_prefix);
  request.stop.max_tokens = max_tokens;
  request.stop.ignore_eos = true;
  return request;
}

// The stub "model": one token per sampling sequence, never EOS.
void fill_result(const gpu::StepBatch& batch, gpu::StepResult& result) {
  result.step_id = batch.step_id;
  result.tokens.resize(batch.sampling.size());
  size_t next = 0;
  for (const gpu::SequenceSlice& slice : batch.seqs) {
    if (!slice.sample) continue;
    result.tokens[next].seq_id = slice.seq_id;
    result.tokens[next].token_id = static_cast<int32_t>(3 + (slice.context_len % 30000));
    ++next;
  }
}

// Runs steps until every sequence decodes (all prompts computed).
void prefill_all(Scheduler& scheduler, gpu::StepResult& result) {
  for (int guard = 0; guard < 10000; ++guard) {
    const StepPlan plan = scheduler.schedule();
    if (plan.empty()) throw std::runtime_error("nothing to run during set-up");
    fill_result(plan.batch, result);
    (void)scheduler.on_step_complete(result);
    if (plan.num_prefill_tokens == 0) return;
  }
}

void BM_DecodeStep(benchmark::State& state) {
  const auto num_seqs = static_cast<int32_t>(state.range(0));
  Scheduler scheduler(bench_config(num_seqs));
  for (int32_t i = 0; i < num_seqs; ++i) {
    if (scheduler.add_request(request_for(static_cast<uint64_t>(i + 1), 1 << 20, 0)) !=
        AddResult::kAccepted) {
      state.SkipWithError("request refused");
      return;
    }
  }
  gpu::StepResult result;
  prefill_all(scheduler, result);
  for (auto _ : state) {
    StepPlan plan = scheduler.schedule();
    fill_result(plan.batch, result);
    StepUpdate update = scheduler.on_step_complete(result);
    benchmark::DoNotOptimize(update.tokens.data());
  }
  const auto stats = scheduler.stats();
  state.counters["seqs"] = stats.num_running;
  state.counters["ctx_end"] = scheduler.slots().front().num_tokens;
  state.counters["kv_usage"] = stats.kv.usage_ratio;
}
BENCHMARK(BM_DecodeStep)->Arg(256)->Iterations(kSteps)->Repetitions(5)->Unit(benchmark::kMicrosecond);

void BM_ChurnStep(benchmark::State& state) {
  const auto num_seqs = static_cast<int32_t>(state.range(0));
  Scheduler scheduler(bench_config(num_seqs));
  constexpr int32_t kSharedPrefix = 1024;
  uint64_t next_id = 1;
  // Staggered lengths: about one sequence finishes per step once running.
  for (int32_t i = 0; i < num_seqs; ++i) {
    scheduler.add_request(request_for(next_id++, 64 + i * 2, kSharedPrefix));
  }
  gpu::StepResult result;
  prefill_all(scheduler, result);
  for (auto _ : state) {
    StepPlan plan = scheduler.schedule();
    fill_result(plan.batch, result);
    StepUpdate update = scheduler.on_step_complete(result);
    for (size_t i = 0; i < update.finished.size(); ++i) {
      scheduler.add_request(request_for(next_id++, 64 + num_seqs * 2, kSharedPrefix));
    }
    benchmark::DoNotOptimize(update.tokens.data());
  }
  const auto stats = scheduler.stats();
  state.counters["seqs"] = stats.num_running;
  state.counters["finished"] = static_cast<double>(stats.num_requests_finished);
  state.counters["hit_rate"] = stats.prefix_cache_hit_rate;
}
BENCHMARK(BM_ChurnStep)->Arg(256)->Iterations(kSteps)->Repetitions(5)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace troupe::scheduler

BENCHMARK_MAIN();
