// Speculative decoding on the real default model (issue 21): the Scheduler policy driving the
// CPU backend step by step, with n-gram drafts on and off. Greedy output with drafts is
// llama.cpp's reference (tests/reference/smollm2_greedy.json) token for token; seeded sampling
// (penalties, filters, logprobs) emits the same tokens and logprobs with drafts as without;
// and on text that repeats, drafts are accepted (the verify path really runs). Skips when the
// model file is absent.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include "actors/scheduler/scheduler.hpp"
#include "gpu/cpu/cpu_backend.hpp"
#include "model/gguf.hpp"
#include "tests/support/source_dir.hpp"

namespace troupe::scheduler {
namespace {

using ::troupe::test_support::default_model_path;

struct Generated {
  std::map<RequestId, std::vector<int32_t>> tokens;
  std::map<RequestId, std::vector<float>> logprobs;
  std::map<RequestId, std::vector<std::vector<gpu::TokenLogprob>>> top;
  SchedulerStats stats;
};

class SpeculativeModel : public ::testing::Test {
 protected:
  static constexpr int32_t kNumBlocks = 1024;

  static void SetUpTestSuite() {
    if (!std::filesystem::exists(default_model_path())) return;
    auto file = std::make_shared<const model::GgufFile>(model::GgufFile::open(default_model_path()));
    gpu::cpu::CpuBackendConfig config;
    config.num_blocks = kNumBlocks;
    backend_ = gpu::cpu::CpuBackend::from_gguf(file, config).release();
  }
  static void TearDownTestSuite() {
    delete backend_;
    backend_ = nullptr;
  }
  void SetUp() override {
    if (backend_ == nullptr) GTEST_SKIP() << "model not found: " << default_model_path();
  }

  static SchedulerConfig config(int32_t num_speculative_tokens) {
    SchedulerConfig c;
    c.max_num_seqs = 32;
    c.max_num_batched_tokens = 2048;
    c.chunked_prefill_size = 512;
    c.max_model_len = 2048;
    c.num_blocks = kNumBlocks;
    c.block_size = 16;
    c.eos_token_ids = {2};
    if (num_speculative_tokens > 0) {
      c.speculative = {.method = SpeculativeMethod::kNgram,
                       .num_speculative_tokens = num_speculative_tokens,
                       .prompt_lookup_min = 2,
                       .prompt_lookup_max = 4};
    }
    return c;
  }

  // Runs the requests to their end, together, one backend step per scheduler step.
  static Generated run(const SchedulerConfig& c, const std::vector<NewRequest>& requests) {
    Scheduler scheduler(c);
    for (const NewRequest& r : requests) EXPECT_EQ(scheduler.add_request(r), AddResult::kAccepted);
    Generated out;
    for (int step = 0; scheduler.has_unfinished_requests() && step < 10000; ++step) {
      StepPlan plan = scheduler.schedule();
      if (plan.empty()) break;
      const gpu::StepResult result = backend_->run_step(plan.batch);
      const StepUpdate update = scheduler.on_step_complete(result);
      for (const GeneratedToken& t : update.tokens) {
        out.tokens[t.request_id].push_back(t.token_id);
        out.logprobs[t.request_id].push_back(t.logprob);
        out.top[t.request_id].push_back(t.top_logprobs);
      }
      const auto error = scheduler.check_invariants();
      EXPECT_FALSE(error.has_value()) << *error;
    }
    out.stats = scheduler.stats();
    return out;
  }

  static NewRequest request(RequestId id, std::vector<int32_t> prompt, int32_t max_tokens,
                            model::SamplingParams params = {}) {
    NewRequest r;
    r.request_id = id;
    r.prompt_token_ids = std::move(prompt);
    r.stop.max_tokens = max_tokens;
    r.stop.ignore_eos = true;
    r.sampling = params;
    return r;
  }

  static inline gpu::cpu::CpuBackend* backend_ = nullptr;
};

struct Reference {
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;
};

std::vector<Reference> load_reference() {
  const auto path = ::troupe::test_support::source_dir() / "tests" / "reference" / "smollm2_greedy.json";
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(path.string());
  std::vector<Reference> refs;
  for (simdjson::dom::element p : doc["prompts"].get_array()) {
    Reference r;
    for (int64_t v : p["prompt_ids"].get_array()) r.prompt.push_back(static_cast<int32_t>(v));
    for (int64_t v : p["generated_ids"].get_array()) r.generated.push_back(static_cast<int32_t>(v));
    refs.push_back(std::move(r));
  }
  return refs;
}

model::SamplingParams greedy() {
  model::SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

// A text that repeats: a reference prompt and its continuation, twice, then the prompt again.
// The model tends to continue the pattern, so prompt lookup finds drafts it accepts.
std::vector<int32_t> repeating_text(const Reference& r) {
  std::vector<int32_t> text;
  for (int i = 0; i < 2; ++i) {
    text.insert(text.end(), r.prompt.begin(), r.prompt.end());
    text.insert(text.end(), r.generated.begin(), r.generated.end());
  }
  text.insert(text.end(), r.prompt.begin(), r.prompt.end());
  return text;
}

TEST_F(SpeculativeModel, GreedyWithDraftsMatchesTheLlamaCppReference) {
  const std::vector<Reference> refs = load_reference();
  ASSERT_GE(refs.size(), 20u);
  std::vector<NewRequest> requests;
  for (size_t i = 0; i < refs.size(); ++i) {
    requests.push_back(request(i + 1, refs[i].prompt, static_cast<int32_t>(refs[i].generated.size()), greedy()));
  }
  const Generated spec = run(config(4), requests);
  int identical = 0;
  for (size_t i = 0; i < refs.size(); ++i) {
    const std::vector<int32_t>& got = spec.tokens.at(i + 1);
    EXPECT_EQ(got, refs[i].generated) << "prompt " << i;
    identical += got == refs[i].generated ? 1 : 0;
  }
  std::printf("identical greedy continuations with drafts: %d of %zu; %llu verify spans, %llu of "
              "%llu drafts accepted\n",
              identical, refs.size(), static_cast<unsigned long long>(spec.stats.num_spec_drafts),
              static_cast<unsigned long long>(spec.stats.num_spec_accepted_tokens),
              static_cast<unsigned long long>(spec.stats.num_spec_draft_tokens));
  EXPECT_GT(spec.stats.num_spec_drafts, 0u);
}

TEST_F(SpeculativeModel, GreedyOnRepeatingTextAcceptsDraftsAndMatchesPlainDecoding) {
  const std::vector<Reference> refs = load_reference();
  std::vector<NewRequest> requests;
  for (size_t i = 0; i < 4; ++i) requests.push_back(request(i + 1, repeating_text(refs[i]), 96, greedy()));
  const Generated plain = run(config(0), requests);
  const Generated spec = run(config(5), requests);
  for (RequestId id = 1; id <= 4; ++id) EXPECT_EQ(spec.tokens.at(id), plain.tokens.at(id)) << "request " << id;
  EXPECT_EQ(plain.stats.num_spec_drafts, 0u);
  EXPECT_GT(spec.stats.num_spec_accepted_tokens, 50u);
  EXPECT_LT(spec.stats.num_steps, plain.stats.num_steps);
  std::printf("repeating text: %llu steps without drafts, %llu with; %llu of %llu drafts accepted\n",
              static_cast<unsigned long long>(plain.stats.num_steps),
              static_cast<unsigned long long>(spec.stats.num_steps),
              static_cast<unsigned long long>(spec.stats.num_spec_accepted_tokens),
              static_cast<unsigned long long>(spec.stats.num_spec_draft_tokens));
}

// Seeded sampling with penalties, filters and logprobs: drafts change how many steps it takes,
// never which tokens come out nor their logprobs (each position draws what plain decoding
// would). Two choices of one prompt (n = 2: seeds s and s + 1) and another prompt.
TEST_F(SpeculativeModel, SeededSamplingIsTheSameWithDrafts) {
  const std::vector<Reference> refs = load_reference();
  model::SamplingParams params;
  params.temperature = 0.7f;
  params.top_p = 0.95f;
  params.top_k = 50;
  params.repetition_penalty = 1.05f;
  params.frequency_penalty = 0.1f;
  params.penalty_last_n = 64;
  params.logprobs = true;
  params.top_logprobs = 2;
  std::vector<NewRequest> requests;
  for (RequestId id = 1; id <= 3; ++id) {
    params.seed = 1000 + id;
    const Reference& r = refs[id == 3 ? 5 : 2];
    requests.push_back(request(id, repeating_text(r), 80, params));
  }
  const Generated plain = run(config(0), requests);
  const Generated spec = run(config(4), requests);
  const Generated again = run(config(4), requests);
  for (RequestId id = 1; id <= 3; ++id) {
    EXPECT_EQ(spec.tokens.at(id), plain.tokens.at(id)) << "request " << id;
    EXPECT_EQ(spec.logprobs.at(id), plain.logprobs.at(id)) << "request " << id;
    ASSERT_EQ(spec.top.at(id).size(), plain.top.at(id).size());
    for (size_t i = 0; i < spec.top.at(id).size(); ++i) {
      ASSERT_EQ(spec.top.at(id)[i].size(), 2u);
      EXPECT_EQ(spec.top.at(id)[i][0].token_id, plain.top.at(id)[i][0].token_id);
      EXPECT_EQ(spec.top.at(id)[i][1].logprob, plain.top.at(id)[i][1].logprob);
    }
    EXPECT_EQ(again.tokens.at(id), spec.tokens.at(id));
  }
  EXPECT_NE(spec.tokens.at(1), spec.tokens.at(2));  // different seeds, different choices
  EXPECT_GT(spec.stats.num_spec_accepted_tokens, 0u);
}

}  // namespace
}  // namespace troupe::scheduler
