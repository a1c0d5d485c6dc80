// The q8_0 KV cache's decode attention (gpu/cpu/attention_q8.hpp) beside the f16 cache's
// (gpu/cpu/attention.hpp, the forward's decode order), each at every SIMD ISA this CPU runs (an
// AVX2-only CPU's pair is the avx2 one), alternated in one process: on a shared 2-vCPU box whose speed drifts between processes by
// tens of percent, only a comparison inside one process is worth reading.
//
//   attention_q8_bench [--context N] [--rounds N] [--scalar]
//
// Shape: SmolLM2-135M's attention (3 KV heads of 64, 3 query heads each), 16 sequences whose
// pages are scattered over the pool (a shuffled block table), 8 layers of KV (more than the
// caches hold), one generated token per sequence: what a batch-16 decode step's attention does
// per layer, times 8, on one thread. Prints milliseconds per pass per form, each round, then the
// medians and each q8_0 form's time over the f16 cache's at the same ISA. --scalar adds the
// q8_0 scalar twins (slow).
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

// kLayers layers of `dtype` KV for num_blocks pages, every row random.
std::vector<Layer> make_layers(KvDtype dtype, int32_t num_blocks, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<Layer> layers(kLayers);
  std::vector<float> k(kKvHeads * kHeadDim), v(kKvHeads * kHeadDim);
  for (Layer& layer : layers) {
    KvLayerView& view = layer.view;
    view.num_blocks = num_blocks;
    view.block_size = kBlockSize;
    view.num_kv_heads = kKvHeads;
    view.head_dim = kHeadDim;
    view.dtype = dtype;
    layer.k.resize(view.block_elements() * static_cast<size_t>(num_blocks));
    layer.v.resize(layer.k.size());
    view.k = layer.k.data();
    view.v = layer.v.data();
    for (int32_t b = 0; b < num_blocks; ++b) {
      for (int32_t slot = 0; slot < kBlockSize; ++slot) {
        for (float& x : k) x = normal(rng);
        for (float& x : v) x = normal(rng);
        if (dtype == KvDtype::kQ8_0) {
          kv_store_q8_0(view, b, slot, k.data(), v.data(), supported_isa());
        } else {
          kv_store(view, b, slot, k.data(), v.data(), supported_isa());
        }
      }
    }
  }
  return layers;
}

}  // namespace

int main(int argc, char** argv) {
  int32_t context = 4096, rounds = 6;
  bool scalar = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--scalar") == 0) scalar = true;
    if (i + 1 == argc) break;
    if (std::strcmp(argv[i], "--context") == 0) context = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
  }
  const int32_t pages_per_seq = (context + kBlockSize - 1) / kBlockSize;
  const int32_t num_blocks = kSeqs * pages_per_seq;
  std::mt19937 rng(20261206);
  const std::vector<Layer> q8_layers = make_layers(KvDtype::kQ8_0, num_blocks, rng);
  const std::vector<Layer> f16_layers = make_layers(KvDtype::kF16, num_blocks, rng);
  std::vector<int32_t> table(static_cast<size_t>(num_blocks));
  for (int32_t i = 0; i < num_blocks; ++i) table[static_cast<size_t>(i)] = i;
  std::shuffle(table.begin(), table.end(), rng);
  std::normal_distribution<float> normal;
  std::vector<float> q(kGroup * kHeadDim), out(kGroup * kHeadDim);
  for (float& x : q) x = normal(rng);
  Q8AttentionScratch scratch;
  std::vector<float> f16_scratch(static_cast<size_t>(kGroup) * context);
  // One pass: every layer, sequence and KV head; `form` is "f16/<isa>" or "q8_0/<isa>".
  auto pass = [&](const std::string& form, IsaLevel isa) {
    const auto start = std::chrono::steady_clock::now();
    for (int32_t l = 0; l < kLayers; ++l) {
      for (int32_t s = 0; s < kSeqs; ++s) {
        const int32_t* pages = table.data() + s * pages_per_seq;
        for (int32_t h = 0; h < kKvHeads; ++h) {
          if (form.starts_with("f16")) {
            attention_group(f16_layers[l].view, pages, context, h, q.data(), kGroup, 0.125f,
                            out.data(), f16_scratch.data(), isa, /*fp16_probabilities=*/true,
                            /*single_token=*/true);
            continue;
          }
          Q8AttentionRows rows;
          rows.first_position = context - 1;
          rows.num_heads = kGroup;
          rows.q = q.data();
          rows.q_stride = kGroup * kHeadDim;
          rows.out = out.data();
          rows.out_stride = kGroup * kHeadDim;
          rows.scale = 0.125f;
          attention_q8_0(q8_layers[l].view, pages, h, rows, scratch, isa);
        }
      }
    }
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  };
  std::vector<std::pair<std::string, IsaLevel>> forms;
  for (IsaLevel isa : runnable_isas()) {
    const std::string name(to_string(isa));
    if (isa != IsaLevel::kScalar) forms.emplace_back("f16/" + name, isa);
    if (isa != IsaLevel::kScalar || scalar) forms.emplace_back("q8_0/" + name, isa);
  }
  std::printf("decode attention: context %d, %d sequences x %d layers x %d KV heads\n", context,
              kSeqs, kLayers, kKvHeads);
  // Streamed through before every pass: a decode step's KV (30 layers at 4k: 0.8 GB as q8_0)
  // does not stay in this CPU's last-level cache (300 MB here), so neither may a pass's, or a
  // form that follows another over the same rows would read them from L3.
  std::vector<int64_t> evict(size_t{768} << 17);  // 768 MB
  int64_t evict_sum = 0;
  std::map<std::string, std::vector<double>> times;
  for (int32_t round = 0; round < rounds; ++round) {
    for (const auto& [form, isa] : forms) {
      for (int64_t& x : evict) evict_sum += ++x;
      const double ms = pass(form, isa);
      times[form].push_back(ms);
      std::printf("%s %.1f ms  ", form.c_str(), ms);
    }
    std::printf("\n");
  }
  std::map<std::string, double> medians;
  std::printf("medians:");
  for (auto& [form, t] : times) {
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    medians[form] = t[t.size() / 2];
    std::printf(" %s %.1f ms", form.c_str(), medians[form]);
  }
  std::printf("\nq8_0 over f16 at the same ISA:");
  if (evict_sum == 42) std::printf(" ");  // keeps the eviction from being optimized away
  for (const auto& [form, ms] : medians) {
    const std::string isa = form.substr(form.find('/') + 1);
    if (form.starts_with("q8_0") && medians.contains("f16/" + isa)) {
      std::printf(" %s %.2f", isa.c_str(), ms / medians["f16/" + isa]);
    }
  }
  std::printf("\n");
}
