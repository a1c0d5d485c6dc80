// The q8_0 KV cache's decode attention (gpu/cpu/attention_q8.hpp) at every ISA this CPU runs,
// alternated in one process: on a shared 2-vCPU box whose speed drifts between processes by
// tens of percent, only a comparison inside one process is worth reading.
//
//   attention_q8_bench [--context N] [--rounds N]
//
// Shape: SmolLM2-135M's attention (3 KV heads of 64, 3 query heads each), 16 sequences whose
// pages are scattered over the pool (a shuffled block table), 8 layers of KV (more than the
// caches hold), one generated token per sequence: what a batch-16 decode step's attention does
// per layer, times 8. Prints milliseconds per pass per ISA, each round, then the medians.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gpu/cpu/attention_q8.hpp"
#include "gpu/cpu/cpu_features.hpp"

namespace {

using troupe::gpu::KvDtype;
using namespace troupe::gpu::cpu;

constexpr int32_t kLayers = 8, kSeqs = 16, kBlockSize = 16, kKvHeads = 3, kGroup = 3, kHeadDim = 64;

struct Layer {
  std::vector<uint16_t> k, v;
  KvLayerView view;
};

}  // namespace

int main(int argc, char** argv) {
  int32_t context = 4096, rounds = 6;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--context") == 0) context = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
  }
  const int32_t pages_per_seq = (context + kBlockSize - 1) / kBlockSize;
  const int32_t num_blocks = kSeqs * pages_per_seq;
  std::mt19937 rng(20261206);
  std::normal_distribution<float> normal;
  std::vector<Layer> layers(kLayers);
  std::vector<float> k(kKvHeads * kHeadDim), v(kKvHeads * kHeadDim);
  for (Layer& layer : layers) {
    KvLayerView& view = layer.view;
    view.num_blocks = num_blocks;
    view.block_size = kBlockSize;
    view.num_kv_heads = kKvHeads;
    view.head_dim = kHeadDim;
    view.dtype = KvDtype::kQ8_0;
    layer.k.resize(view.block_elements() * static_cast<size_t>(num_blocks));
    layer.v.resize(layer.k.size());
    view.k = layer.k.data();
    view.v = layer.v.data();
    for (int32_t b = 0; b < num_blocks; ++b) {
      for (int32_t slot = 0; slot < kBlockSize; ++slot) {
        for (float& x : k) x = normal(rng);
        for (float& x : v) x = normal(rng);
        kv_store_q8_0(view, b, slot, k.data(), v.data(), IsaLevel::kScalar);
      }
    }
  }
  std::vector<int32_t> table(static_cast<size_t>(num_blocks));
  for (int32_t i = 0; i < num_blocks; ++i) table[static_cast<size_t>(i)] = i;
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<float> q(kGroup * kHeadDim), out(kGroup * kHeadDim);
  for (float& x : q) x = normal(rng);
  Q8AttentionScratch scratch;
  std::printf("q8_0 decode attention: context %d, %d sequences x %d layers x %d KV heads\n",
              context, kSeqs, kLayers, kKvHeads);
  std::map<IsaLevel, std::vector<double>> times;
  for (int32_t round = 0; round < rounds; ++round) {
    for (IsaLevel isa : runnable_isas()) {
      const auto start = std::chrono::steady_clock::now();
      for (const Layer& layer : layers) {
        for (int32_t s = 0; s < kSeqs; ++s) {
          for (int32_t h = 0; h < kKvHeads; ++h) {
            Q8AttentionRows rows;
            rows.first_position = context - 1;
            rows.num_heads = kGroup;
            rows.q = q.data();
            rows.q_stride = kGroup * kHeadDim;
            rows.out = out.data();
            rows.out_stride = kGroup * kHeadDim;
            rows.scale = 0.125f;
            attention_q8_0(layer.view, table.data() + s * pages_per_seq, h, rows, scratch, isa);
          }
        }
      }
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      times[isa].push_back(ms);
      std::printf("%s %.1f ms  ", std::string(to_string(isa)).c_str(), ms);
    }
    std::printf("\n");
  }
  std::printf("medians:");
  for (auto& [isa, t] : times) {
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    std::printf(" %s %.1f ms", std::string(to_string(isa)).c_str(), t[t.size() / 2]);
  }
  std::printf("\n");
}
