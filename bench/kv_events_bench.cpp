// The cost KV events add where the engine pays it (issue 20): KvCacheManager::cache_full_blocks
// for a 512-token prompt (32 blocks of 16 tokens), with events off and on (one SHA-256 over
// ~70 bytes of CBOR per new block, plus the event's vectors), and the hash alone per block.
#include <benchmark/benchmark.h>

#include <numeric>
#include <vector>

#include "actors/kv_cache/kv_cache_manager.hpp"

namespace {

using namespace troupe::kv_cache;

void CacheFullBlocks(benchmark::State& state) {
  KvCacheConfig config{.num_blocks = 64, .block_size = 16, .enable_prefix_caching = true};
  config.emit_events = state.range(0) != 0;
  std::vector<int32_t> prompt(512);
  std::iota(prompt.begin(), prompt.end(), 1000);
  KvCacheManager kv(config);
  for (auto _ : state) {
    state.PauseTiming();
    (void)kv.flush_unreferenced_cache();
    (void)kv.take_events();
    SequenceBlocks seq;
    (void)kv.allocate_slots(seq, 512);
    state.ResumeTiming();
    kv.cache_full_blocks(seq, prompt, 512);
    state.PauseTiming();
    kv.free_sequence(seq);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * 32);  // blocks
  state.SetLabel(config.emit_events ? "events on" : "events off");
}
BENCHMARK(CacheFullBlocks)->Arg(0)->Arg(1);

void BlockHash(benchmark::State& state) {
  const KvBlockHasher hasher("42");
  std::vector<int32_t> tokens(16);
  std::iota(tokens.begin(), tokens.end(), 30000);
  BlockDigest digest = hasher.root();
  for (auto _ : state) {
    digest = hasher.block(digest, tokens);
    benchmark::DoNotOptimize(digest);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BlockHash);

}  // namespace

BENCHMARK_MAIN();
