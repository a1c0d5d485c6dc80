// The structured-output mask on the device (gpu/cuda/token_mask.cuh) against its CPU twin
// (gpu/cpu/token_mask.hpp): bit for bit, in place and into a separate buffer, rows picked by
// their bitmask index (-1 rows never written); and the device sampler with masked rows against
// the CPU sampler given the same bitmask rows (greedy exactly, every token allowed, logprobs of
// the raw logits). Skips without a CUDA device, except the host half: how a step's bitmask rows
// and their indices are checked and packed with the step's inputs (CudaStepInputs.*).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include "gpu/cpu/sampler.hpp"
#include "gpu/cpu/token_mask.hpp"
#include "gpu/cuda/sampling.cuh"
#include "gpu/cuda/step_inputs.hpp"
#include "gpu/cuda/token_mask.cuh"
#include "gpu/kv_groups.hpp"
#include "model/grammar/token_bitmask.hpp"
#include "model/llama_config.hpp"
#include "tests/gpu/cpu_step_harness.hpp"
#include "tests/gpu/cpu_test_util.hpp"
#include "tests/gpu/cuda_test_util.hpp"

namespace troupe::gpu::cuda {
namespace {

using cuda::testing::DeviceArray;
using model::grammar::bitmask_num_words;
using model::grammar::token_allowed;

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// Bitmask rows mixing all-zero, all-one and random words (every shape a grammar produces), and
// a few with only a handful of allowed tokens (a structural position in JSON).
std::vector<uint32_t> random_bitmask(int32_t num_rows, int32_t num_words, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> words(static_cast<size_t>(num_rows) * num_words);
  for (int32_t r = 0; r < num_rows; ++r) {
    uint32_t* row = words.data() + static_cast<size_t>(r) * num_words;
    if (r % 4 == 3) {
      for (int32_t w = 0; w < num_words; ++w) row[w] = 0;
      for (int i = 0; i < 3; ++i) row[rng() % num_words] |= 1u << (rng() % 32);
      continue;
    }
    for (int32_t w = 0; w < num_words; ++w) {
      const uint32_t kind = rng() % 3;
      row[w] = kind == 0 ? 0u : kind == 1 ? ~0u : static_cast<uint32_t>(rng());
    }
  }
  return words;
}

TEST(CudaTokenMask, MatchesCpuTwinBitForBit) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  // Vocabularies around word and block edges, the default model's, and a bitmask narrower than
  // the row (tokens past it are disallowed on both).
  struct Case {
    int32_t vocab, num_words;
  };
  for (const Case c : {Case{1, 1}, Case{31, 1}, Case{33, 2}, Case{1024, 32}, Case{1025, 33},
                       Case{49152, 1536}, Case{49152, 1500}, Case{5000, 157}}) {
    const int32_t rows = 9, mask_rows = 5;
    const std::vector<float> logits = cpu::testing::random_floats(static_cast<size_t>(rows) * c.vocab, c.vocab, 3.0f);
    const std::vector<uint32_t> bitmask = random_bitmask(mask_rows, c.num_words, c.vocab + 1);
    // Rows 1, 4 and 7 unconstrained; the others take bitmask rows out of order.
    const std::vector<int32_t> which = {4, -1, 0, 3, -1, 2, 1, -1, 4};
    DeviceArray<float> d_in(logits), d_out(logits.size());
    DeviceArray<uint32_t> d_bitmask(bitmask);
    DeviceArray<int32_t> d_which(which);
    TokenMaskArgs a{.in = d_in.get(), .out = d_out.get(), .num_rows = rows, .n_vocab = c.vocab,
                    .bitmask = d_bitmask.get(), .num_words = c.num_words,
                    .bitmask_rows = d_which.get()};
    apply_token_bitmask(a, nullptr);  // into a NaN-poisoned buffer
    const std::vector<float> out_of_place = d_out.download();
    a.out = d_in.get();
    apply_token_bitmask(a, nullptr);  // in place
    const std::vector<float> in_place = d_in.download();
    for (int32_t r = 0; r < rows; ++r) {
      std::vector<float> want(logits.begin() + static_cast<size_t>(r) * c.vocab,
                              logits.begin() + static_cast<size_t>(r + 1) * c.vocab);
      if (which[r] >= 0) {
        cpu::apply_token_bitmask(want, std::span<const uint32_t>(bitmask.data() + static_cast<size_t>(which[r]) * c.num_words,
                                                                 static_cast<size_t>(c.num_words)));
      }
      for (int32_t t = 0; t < c.vocab; ++t) {
        const size_t i = static_cast<size_t>(r) * c.vocab + t;
        ASSERT_EQ(bits_of(in_place[i]), bits_of(want[t])) << "vocab " << c.vocab << " row " << r << " token " << t;
        if (which[r] >= 0) {
          ASSERT_EQ(bits_of(out_of_place[i]), bits_of(want[t])) << "vocab " << c.vocab << " row " << r << " token " << t;
        } else {
          ASSERT_TRUE(std::isnan(out_of_place[i])) << "unconstrained row " << r << " was written";
        }
      }
    }
  }
}

// sample_rows with constrained rows against cpu::Sampler given the same bitmask rows: the mask
// comes before logit_bias, penalties, the filters and greedy, and logprobs stay the raw ones.
TEST(CudaTokenMask, SamplerAppliesTheMaskBeforeTheChainLikeTheCpu) {
  TROUPE_REQUIRE_CUDA_DEVICE();
  const int32_t V = 5000, W = static_cast<int32_t>(bitmask_num_words(V));
  std::vector<model::SamplingParams> kinds(4);
  kinds[0].temperature = 0.0f;  // greedy
  kinds[1].temperature = 1.0f;  // plain draw
  kinds[2].temperature = 0.8f;
  kinds[2].top_k = 40;
  kinds[2].top_p = 0.9f;
  kinds[3].temperature = 0.0f;  // greedy with a bias that would pick a masked token
  kinds[3].logit_bias = {{11, 100.0f}};
  for (model::SamplingParams& p : kinds) {
    p.logprobs = true;
    p.top_logprobs = 3;
  }
  const int32_t per_kind = 16, rows = 4 * per_kind;
  const std::vector<float> logits = cpu::testing::random_floats(static_cast<size_t>(rows) * V, 91, 3.0f);
  // Even rows constrained (bitmask row = their index / 2, so out of the logits rows' order is
  // covered by the first test); token 11 never allowed, so the bias of kind 3 must lose.
  const int32_t num_masked = rows / 2;
  std::vector<uint32_t> bitmask = random_bitmask(num_masked, W, 17);
  for (int32_t m = 0; m < num_masked; ++m) {
    uint32_t* row = bitmask.data() + static_cast<size_t>(m) * W;
    row[0] &= ~(1u << 11);
    row[m % W] |= 1u << 5;  // at least one allowed token per row
  }
  std::vector<SamplingSlot> slots(rows);
  std::vector<SamplingRowParams> params(rows);
  std::vector<int32_t> which(rows), bias_ids;
  std::vector<float> bias_values;
  for (int32_t r = 0; r < rows; ++r) {
    SamplingSlot& slot = slots[r];
    slot.params = kinds[r / per_kind];
    slot.params.seed = 500 + r;
    slot.num_generated = r % 5;
    slot.bitmask_row = r % 2 == 0 ? r / 2 : -1;
    which[r] = slot.bitmask_row;
    SamplingRowParams& q = params[r];
    q = sampling_row_params(slot);
    q.bias_offset = static_cast<int32_t>(bias_ids.size());
    q.bias_count = static_cast<int32_t>(slot.params.logit_bias.size());
    for (const model::LogitBias& e : slot.params.logit_bias) {
      bias_ids.push_back(e.token_id);
      bias_values.push_back(e.bias);
    }
  }
  DeviceArray<float> d_logits(logits), workspace(logits.size()), lp(rows), top_lp(rows * kMaxTopLogprobs);
  DeviceArray<int32_t> tokens(rows), top_ids(rows * kMaxTopLogprobs), d_which(which), d_bias_ids(bias_ids);
  DeviceArray<int32_t> d_empty(1);
  DeviceArray<float> d_bias_values(bias_values);
  DeviceArray<uint32_t> d_bitmask(bitmask);
  std::vector<uint8_t> param_bytes(sizeof(SamplingRowParams) * rows);
  std::memcpy(param_bytes.data(), params.data(), param_bytes.size());
  DeviceArray<uint8_t> d_params(param_bytes);
  SamplingArgs a;
  a.logits = d_logits.get();
  a.num_rows = rows;
  a.n_vocab = V;
  a.params = reinterpret_cast<const SamplingRowParams*>(d_params.get());
  a.recent_tokens = d_empty.get();
  a.bias_ids = d_bias_ids.get();
  a.bias_values = d_bias_values.get();
  a.end_token_ids = d_empty.get();
  a.bitmask = d_bitmask.get();
  a.bitmask_num_words = W;
  a.bitmask_rows = d_which.get();
  a.workspace = workspace.get();
  a.out_tokens = tokens.get();
  a.out_logprobs = lp.get();
  a.out_top_ids = top_ids.get();
  a.out_top_logprobs = top_lp.get();
  sample_rows(a, nullptr);
  const std::vector<int32_t> got = tokens.download(), got_top = top_ids.download();
  const std::vector<float> got_lp = lp.download();
  cpu::Sampler sampler;
  int disagreements = 0, sampled = 0;
  for (int32_t r = 0; r < rows; ++r) {
    const std::span<const float> row(&logits[static_cast<size_t>(r) * V], V);
    std::span<const uint32_t> mask;
    if (which[r] >= 0) mask = {bitmask.data() + static_cast<size_t>(which[r]) * W, static_cast<size_t>(W)};
    const SampledToken want = sampler.sample(row, slots[r], {}, mask);
    if (!mask.empty()) {
      ASSERT_TRUE(token_allowed(mask, got[r])) << "row " << r << " sampled disallowed token " << got[r];
    }
    if (slots[r].params.greedy()) {
      ASSERT_EQ(got[r], want.token_id) << "greedy row " << r;
    } else {
      ++sampled;
      if (got[r] != want.token_id) ++disagreements;
    }
    // Raw logprobs: the unmasked distribution's, as on the CPU.
    const float log_sum_exp = row[want.token_id] - want.logprob;  // the raw row's
    ASSERT_NEAR(got_lp[r], row[got[r]] - log_sum_exp, 1e-3) << "row " << r;
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(got_top[r * kMaxTopLogprobs + i], want.top_logprobs[i].token_id) << "row " << r << " alt " << i;
    }
  }
  EXPECT_LE(disagreements, sampled / 10) << disagreements << " of " << sampled << " sampled rows differ from the CPU";
}

// Host only (runs without a device): a constrained step packs the scheduler's bitmask rows as
// they are and each sampling row's index into them; an unconstrained step packs nothing more
// and tells the sampler "no mask"; a bitmask_row past the bitmask is refused.
TEST(CudaStepInputs, PacksTheBitmaskRowsAndTheirIndices) {
  const int32_t V = 512, W = 16;
  cpu::testing::StepHarness h(64, 16);
  h.add(1, {1, 2, 3});
  h.add(2, {4, 5});
  h.add(3, {6});
  StepBatch b = h.build({{1, 3}, {2, 2}, {3, 1}});
  CudaBackendConfig config;
  config.max_num_batched_tokens = 64;
  config.max_num_seqs = 8;
  const std::vector<SamplingRow> rows = collect_sampling_rows(b);
  ASSERT_EQ(rows.size(), 3u);

  const InputLayout plain = input_layout(b, 3);
  EXPECT_FALSE(plain.constrained);
  EXPECT_EQ(plain.bitmask, plain.total);  // nothing packed for the mask
  EXPECT_EQ(device_step_inputs(nullptr, plain).bitmask, nullptr);

  b.bitmask_num_words = W;
  b.token_bitmask.resize(2 * W);
  for (size_t i = 0; i < b.token_bitmask.size(); ++i) b.token_bitmask[i] = 0x9E3779B9u * static_cast<uint32_t>(i + 1);
  b.sampling[b.seqs[0].sampling_index].bitmask_row = 1;
  b.sampling[b.seqs[2].sampling_index].bitmask_row = 0;
  EXPECT_NO_THROW(validate_batch(b, config, V, 64, KvGroups{}));
  const InputLayout in = input_layout(b, 3);
  ASSERT_TRUE(in.constrained);
  EXPECT_EQ(in.bitmask_num_words, W);
  std::vector<unsigned char> host(in.total);
  pack_step_inputs(b, rows, in, 16, host.data());
  std::vector<uint32_t> packed(b.token_bitmask.size());
  std::memcpy(packed.data(), host.data() + in.bitmask, 4 * packed.size());
  EXPECT_EQ(packed, b.token_bitmask);
  std::vector<int32_t> which(3);
  std::memcpy(which.data(), host.data() + in.bitmask_rows, 4 * which.size());
  EXPECT_EQ(which, (std::vector<int32_t>{1, -1, 0}));
  const DeviceStepInputs d = device_step_inputs(host.data(), in);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(d.bitmask), host.data() + in.bitmask);
  EXPECT_EQ(d.bitmask_num_words, W);

  b.sampling[b.seqs[1].sampling_index].bitmask_row = 2;  // the bitmask has rows 0 and 1
  try {
    validate_batch(b, config, V, 64, KvGroups{});
    FAIL() << "a bitmask_row past the bitmask was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bitmask_row out of range"), std::string::npos) << e.what();
  }
}

// Host only: with KV groups (gemma3) each token gets a cache slot in every group's pages, from
// that group's table, and the packed tables keep StepBatch's [group][seq][block] layout; a
// sliding group's pages below the span's window may be -1 (freed), the global group's may not.
TEST(CudaStepInputs, PacksEveryKvGroupsSlotsAndTables) {
  model::LlamaConfig c = *model::LlamaConfig::named_shape("gemma3-270m");
  c.sliding_window = 32;
  const KvGroups groups = KvGroups::of(c);
  ASSERT_EQ(groups.num_groups, 6);
  cpu::testing::StepHarness h(256, 16);
  h.set_kv_groups(groups.num_groups, groups.sliding_window);
  std::vector<int32_t> long_prompt(80), short_prompt(6);
  for (size_t i = 0; i < long_prompt.size(); ++i) long_prompt[i] = static_cast<int32_t>(i + 1);
  for (size_t i = 0; i < short_prompt.size(); ++i) short_prompt[i] = static_cast<int32_t>(i + 100);
  h.add(1, long_prompt);
  h.add(2, short_prompt);
  h.build({{1, 64}, {2, 5}});
  h.release_out_of_window();  // the scheduler's freeing after a step
  StepBatch b = h.build({{1, 16}, {2, 1}});  // past the window: group 1..'s first pages freed
  CudaBackendConfig config;
  config.max_num_batched_tokens = 64;
  config.max_num_seqs = 8;
  const int32_t V = c.n_vocab, blocks = 256;
  EXPECT_NO_THROW(validate_batch(b, config, V, blocks, groups));
  const std::vector<SamplingRow> rows = collect_sampling_rows(b);
  const InputLayout in = input_layout(b, static_cast<int32_t>(rows.size()));
  const int32_t T = b.num_tokens();
  EXPECT_EQ(in.slots_group_stride, T);
  EXPECT_EQ(in.tables_group_stride, static_cast<int64_t>(b.seqs.size()) * b.max_blocks_per_seq);
  std::vector<unsigned char> host(in.total);
  pack_step_inputs(b, rows, in, 16, host.data());
  std::vector<int32_t> slots(static_cast<size_t>(T) * groups.num_groups);
  std::memcpy(slots.data(), host.data() + in.slots, 4 * slots.size());
  std::vector<int32_t> tables(b.block_tables.size());
  std::memcpy(tables.data(), host.data() + in.block_tables, 4 * tables.size());
  EXPECT_EQ(tables, b.block_tables);
  int freed = 0;
  for (int32_t g = 0; g < groups.num_groups; ++g) {
    for (const SequenceSlice& s : b.seqs) {
      const int32_t* row =
          b.block_tables.data() +
          (static_cast<size_t>(g) * b.seqs.size() + s.block_table_row) * b.max_blocks_per_seq;
      freed += row[0] == -1;
      for (int32_t i = 0; i < s.num_tokens; ++i) {
        const int32_t t = s.token_offset + i, pos = b.positions[t];
        ASSERT_EQ(slots[g * T + t], row[pos / 16] * 16 + pos % 16)
            << "group " << g << " token " << t;
      }
    }
  }
  EXPECT_GT(freed, 0) << "the test meant to cover freed pages below the window";

  StepBatch global_freed = b;
  global_freed.block_tables[0] = -1;  // group 0 (the global layers), sequence row 0, page 0
  EXPECT_THROW(validate_batch(global_freed, config, V, blocks, groups), std::invalid_argument);
  StepBatch wrong_groups = b;
  wrong_groups.num_kv_groups = 1;
  EXPECT_THROW(validate_batch(wrong_groups, config, V, blocks, groups), std::invalid_argument);
}

}  // namespace
}  // namespace troupe::gpu::cuda
