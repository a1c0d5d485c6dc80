// Prompt outputs on the CPU backend, real default model (issue 37): a scored position's logprobs
// are computed from exactly the logits a sampling step at that position computes; scores and
// hidden rows do not depend on chunking or on the rest of the batch; a hidden row is the final
// norm's output (the lm-head's input); malformed prompt-output requests are refused. The values
// against llama.cpp are checked end to end (tests/e2e/test_prompt_logprobs.py,
// tests/e2e/test_embeddings.py). Skips when the model file is absent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/cpu/sampler.hpp"
#include "model/gguf.hpp"
#include "tests/gpu/cpu_step_harness.hpp"
#include "tests/gpu/cpu_test_util.hpp"

namespace troupe::gpu::cpu {
namespace {

using testing::StepHarness;

constexpr int32_t kBlocks = 1024;
constexpr int32_t kPromptLength = 45;

// Rows the backend's final norm produced in the last step ("result_norm": sampling rows only).
std::vector<float>& observed_norm() {
  static std::vector<float> rows;
  return rows;
}

class PromptOutputs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::filesystem::path path = testing::default_model_path();
    if (!std::filesystem::exists(path)) return;
    file_ = std::make_shared<const model::GgufFile>(model::GgufFile::open(path));
    CpuBackendConfig cfg;
    cfg.num_blocks = kBlocks;
    cfg.observer = [](const char* name, int32_t, const float* data, int64_t rows, int64_t cols,
                      int64_t ld) {
      if (std::strcmp(name, "result_norm") != 0) return;
      observed_norm().clear();
      for (int64_t r = 0; r < rows; ++r) {
        observed_norm().insert(observed_norm().end(), data + r * ld, data + r * ld + cols);
      }
    };
    backend_ = CpuBackend::from_gguf(file_, cfg).release();
  }
  static void TearDownTestSuite() {
    delete backend_;
    backend_ = nullptr;
    file_.reset();
  }
  void SetUp() override {
    if (backend_ == nullptr) GTEST_SKIP() << "model not found: " << testing::default_model_path();
  }

  static std::vector<int32_t> prompt() {
    std::vector<int32_t> p;
    for (int i = 0; i < kPromptLength; ++i) p.push_back(100 + 37 * i % 4000);
    return p;
  }

  // The prompt computed in chunks of `chunk` beside `others` decoding sequences, every position
  // scored (top 5) and returned as a hidden row. Scores in position order; hidden rows likewise.
  struct Outputs {
    std::vector<ScoredToken> scores;
    std::vector<float> hidden;
  };
  static Outputs run(int32_t chunk, int others, int first_block) {
    std::vector<int32_t> order;
    for (int b = 0; b < kBlocks; ++b) order.push_back((first_block + b * 7) % kBlocks);
    StepHarness h(kBlocks, 16, order);
    const std::vector<int32_t> p = prompt();
    h.add(1000, p);
    for (int o = 0; o < others; ++o) h.add(o, std::vector<int32_t>(3 + 5 * o, 200 + o));
    Outputs out;
    for (int32_t done = 0; done < kPromptLength; done += chunk) {
      std::vector<std::pair<uint64_t, int32_t>> work;
      for (int o = 0; o < others; ++o) {
        const auto& s = h.seq(o);
        work.push_back({o, std::min<int32_t>(4, static_cast<int32_t>(s.tokens.size()) - s.computed)});
      }
      const int32_t n = std::min(chunk, kPromptLength - done);
      work.insert(work.begin() + static_cast<std::ptrdiff_t>(work.size() / 2), {1000, n});
      StepBatch b = h.build(work);
      for (SequenceSlice& s : b.seqs) {
        if (s.seq_id != 1000) continue;
        const int32_t scored_end = std::min(done + n, kPromptLength - 1);
        s.scored_begin = done;
        s.num_scored = scored_end - done;
        s.score_offset = static_cast<int32_t>(b.score_targets.size());
        s.score_top_n = 5;
        b.score_targets.insert(b.score_targets.end(), p.begin() + done + 1, p.begin() + scored_end + 1);
        s.hidden_begin = done;
        s.num_hidden = n;
      }
      const StepResult r = backend_->run_step(b);
      for (const PromptScores& scores : r.scores) {
        EXPECT_EQ(scores.seq_id, 1000u);
        EXPECT_EQ(scores.first_position, done);
        out.scores.insert(out.scores.end(), scores.tokens.begin(), scores.tokens.end());
      }
      for (const HiddenRows& rows : r.hidden) {
        EXPECT_EQ(rows.first_position, done);
        out.hidden.insert(out.hidden.end(), rows.values.begin(), rows.values.end());
      }
      h.accept(r);
    }
    return out;
  }

  static inline std::shared_ptr<const model::GgufFile> file_;
  static inline CpuBackend* backend_ = nullptr;
};

bool same(const ScoredToken& a, const ScoredToken& b) {
  if (a.token_id != b.token_id || a.rank != b.rank || a.top_logprobs.size() != b.top_logprobs.size() ||
      std::memcmp(&a.logprob, &b.logprob, sizeof(float)) != 0) {
    return false;
  }
  for (size_t i = 0; i < a.top_logprobs.size(); ++i) {
    if (a.top_logprobs[i].token_id != b.top_logprobs[i].token_id ||
        std::memcmp(&a.top_logprobs[i].logprob, &b.top_logprobs[i].logprob, sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

TEST_F(PromptOutputs, ScoresAndHiddenRowsIgnoreChunkingAndTheBatch) {
  const Outputs alone = run(kPromptLength, 0, 0);
  ASSERT_EQ(alone.scores.size(), static_cast<size_t>(kPromptLength - 1));
  ASSERT_EQ(alone.hidden.size(), static_cast<size_t>(kPromptLength * 576));
  for (const Outputs& other : {run(kPromptLength, 5, 300), run(7, 3, 600), run(1, 2, 900)}) {
    ASSERT_EQ(other.scores.size(), alone.scores.size());
    for (size_t i = 0; i < alone.scores.size(); ++i) EXPECT_TRUE(same(alone.scores[i], other.scores[i])) << i;
    EXPECT_EQ(0, std::memcmp(alone.hidden.data(), other.hidden.data(), 4 * alone.hidden.size()));
  }
}

// Teacher forcing: the prompt cut after position j, sampled. Its logits row is the one the
// score of position j used, and its final-norm row the hidden row of position j.
TEST_F(PromptOutputs, APositionsOutputsAreThoseOfSamplingThere) {
  const Outputs whole = run(16, 0, 0);
  const std::vector<int32_t> p = prompt();
  const int64_t V = 49152;
  for (const int32_t j : {0, 1, 15, 16, 30, kPromptLength - 2}) {
    StepHarness h(kBlocks, 16);
    h.add(7, std::vector<int32_t>(p.begin(), p.begin() + j + 1));
    const StepBatch b = h.build({{7, j + 1}});
    const std::vector<float> logits = backend_->compute_logits(b);
    ASSERT_EQ(static_cast<int64_t>(logits.size()), V);
    Sampler sampler;
    const ScoredToken expected =
        sampler.score(std::span<const float>(logits.data(), static_cast<size_t>(V)), p[static_cast<size_t>(j + 1)], 5);
    EXPECT_TRUE(same(expected, whole.scores[static_cast<size_t>(j)])) << "position " << j;
    EXPECT_EQ(expected.token_id, p[static_cast<size_t>(j + 1)]);
    EXPECT_GE(expected.rank, 1);
    ASSERT_EQ(observed_norm().size(), 576u);
    EXPECT_EQ(0, std::memcmp(observed_norm().data(), whole.hidden.data() + static_cast<size_t>(j) * 576, 4 * 576))
        << "position " << j;
  }
}

TEST_F(PromptOutputs, MalformedRequestsAreRefused) {
  const std::vector<int32_t> p = prompt();
  auto batch = [&](auto&& edit) {
    StepHarness h(kBlocks, 16);
    h.add(1, p);
    StepBatch b = h.build({{1, 10}});
    b.score_targets = {5, 6, 7};
    b.seqs[0].scored_begin = 0;
    b.seqs[0].num_scored = 3;
    edit(b);
    return b;
  };
  EXPECT_NO_THROW(backend_->run_step(batch([](StepBatch&) {})));
  EXPECT_THROW(backend_->run_step(batch([](StepBatch& b) { b.seqs[0].num_scored = 11; })), std::invalid_argument);
  EXPECT_THROW(backend_->run_step(batch([](StepBatch& b) { b.seqs[0].scored_begin = 8; })), std::invalid_argument);
  EXPECT_THROW(backend_->run_step(batch([](StepBatch& b) { b.score_targets = {5, 6}; })), std::invalid_argument);
  EXPECT_THROW(backend_->run_step(batch([](StepBatch& b) { b.score_targets[1] = 49152; })), std::invalid_argument);
  EXPECT_THROW(backend_->run_step(batch([](StepBatch& b) {
                 b.seqs[0].hidden_begin = 5;
                 b.seqs[0].num_hidden = 6;
               })),
               std::invalid_argument);
}

}  // namespace
}  // namespace troupe::gpu::cpu
