// StructuredOutput (actors/scheduler/structured_output.hpp), the matchers the scheduler actor
// owns, on hand-built step batches and the real SmolLM2 tokenizer: which slots get a bitmask
// row, what the row allows, what accept() reports, and a preempted sequence's matcher.
#include "actors/scheduler/structured_output.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "model/gguf.hpp"
#include "model/grammar/grammar_compiler.hpp"
#include "model/grammar/token_bitmask.hpp"
#include "model/tokenizer.hpp"
#include "tests/support/source_dir.hpp"

namespace troupe::scheduler {
namespace {

using model::grammar::CompiledGrammar;
using model::grammar::GrammarCompiler;
using model::grammar::GrammarSpec;
using model::grammar::TokenizerInfo;

using ::troupe::test_support::default_model_path;

struct Fixture {
  model::Tokenizer tokenizer;
  GrammarCompiler compiler;
  explicit Fixture(model::Tokenizer t)
      : tokenizer(t), compiler(TokenizerInfo::from_tokenizer(t)) {}
  std::shared_ptr<const CompiledGrammar> compile(const GrammarSpec& spec) {
    auto result = compiler.compile(spec);
    EXPECT_TRUE(result.ok()) << result.error;
    return std::make_shared<const CompiledGrammar>(*result.grammar);
  }
  // The single token for `text` (each digit is one token in SmolLM2's vocabulary).
  int32_t token(const std::string& text) {
    const auto ids = tokenizer.encode(text, false);
    EXPECT_EQ(ids.size(), 1u) << text;
    return ids.empty() ? -1 : ids.front();
  }
};

Fixture* fixture() {
  static std::unique_ptr<Fixture> f = []() -> std::unique_ptr<Fixture> {
    if (!std::filesystem::exists(default_model_path())) return nullptr;
    return std::make_unique<Fixture>(model::Tokenizer::from_gguf(model::GgufFile::open(default_model_path())));
  }();
  return f.get();
}

#define REQUIRE_TOKENIZER()                                          \
  Fixture* f = fixture();                                            \
  if (f == nullptr) GTEST_SKIP() << "default model not found; run scripts/setup"

// Three sequences: 1 decodes (constrained), 2 decodes (unconstrained), 3 is a prefill chunk
// that does not sample (constrained, so it must get no row).
gpu::StepBatch batch_of_three() {
  gpu::StepBatch batch;
  batch.seqs = {{.seq_id = 1, .sample = true, .sampling_index = 0},
                {.seq_id = 2, .sample = true, .sampling_index = 1},
                {.seq_id = 3, .sample = false}};
  batch.sampling.resize(2);
  return batch;
}

TEST(StructuredOutput, FillsARowOnlyForConstrainedSamplingSlots) {
  REQUIRE_TOKENIZER();
  StructuredOutput structured;
  const auto digits = f->compile(GrammarSpec::regex("[0-9]{3}"));
  structured.add(1, digits);
  structured.add(3, digits);
  gpu::StepBatch batch = batch_of_three();
  ASSERT_EQ(structured.fill_bitmasks(batch), 1);
  EXPECT_EQ(batch.sampling[0].bitmask_row, 0);
  EXPECT_EQ(batch.sampling[1].bitmask_row, -1);
  const auto row = batch.bitmask_of(batch.sampling[0]);
  ASSERT_EQ(row.size(), TokenizerInfo::from_tokenizer(f->tokenizer).bitmask_num_words());
  EXPECT_TRUE(model::grammar::token_allowed(row, f->token("7")));
  EXPECT_FALSE(model::grammar::token_allowed(row, f->token("a")));
  EXPECT_TRUE(batch.bitmask_of(batch.sampling[1]).empty());
}

TEST(StructuredOutput, NothingConstrainedLeavesTheBatchUntouched) {
  REQUIRE_TOKENIZER();
  StructuredOutput structured;
  gpu::StepBatch batch = batch_of_three();
  EXPECT_EQ(structured.fill_bitmasks(batch), 0);
  EXPECT_TRUE(batch.token_bitmask.empty());
  EXPECT_EQ(batch.bitmask_num_words, 0);
}

TEST(StructuredOutput, AcceptReportsTheGrammarsEndAndRefusals) {
  REQUIRE_TOKENIZER();
  StructuredOutput structured;
  structured.add(1, f->compile(GrammarSpec::regex("[0-9]{3}")));
  const int32_t eos = f->tokenizer.end_of_generation_ids().front();
  auto step = [&](RequestId id, int32_t token) {
    return structured.accept({GeneratedToken{.request_id = id, .token_id = token}});
  };
  for (const char* digit : {"1", "2", "3"}) {
    const auto ended = step(1, f->token(digit));
    EXPECT_TRUE(ended.grammar_ended.empty());
    EXPECT_TRUE(ended.refused.empty());
  }
  // Only the end may follow three digits: a fourth is refused, the EOS ends the grammar.
  EXPECT_EQ(step(1, f->token("4")).refused, std::vector<RequestId>{1});
  EXPECT_EQ(step(1, eos).grammar_ended, std::vector<RequestId>{1});
  // Not finished yet (a wiring slip): the next mask allows only the end, nothing throws, and the
  // next token is refused, which ends the sequence.
  gpu::StepBatch batch = batch_of_three();
  ASSERT_EQ(structured.fill_bitmasks(batch), 1);
  const auto row = batch.bitmask_of(batch.sampling[0]);
  EXPECT_TRUE(model::grammar::token_allowed(row, eos));
  EXPECT_FALSE(model::grammar::token_allowed(row, f->token("5")));
  EXPECT_EQ(step(1, eos).refused, std::vector<RequestId>{1});
  // Tokens of unconstrained sequences are none of its business.
  EXPECT_TRUE(step(2, f->token("a")).refused.empty());
  structured.remove(1);
  EXPECT_FALSE(structured.constrains(1));
}

TEST(StructuredOutput, APreemptedSequenceResumesFromTheSameGrammarState) {
  REQUIRE_TOKENIZER();
  // A preempted sequence keeps its generated tokens, so its matcher (which accepted them) is
  // left alone: after recompute the mask is the one it would have had without preemption.
  StructuredOutput preempted;
  StructuredOutput never;
  const auto digits = f->compile(GrammarSpec::regex("[0-9]{3}"));
  preempted.add(1, digits);
  never.add(1, digits);
  for (StructuredOutput* s : {&preempted, &never}) {
    s->accept({GeneratedToken{.request_id = 1, .token_id = f->token("4")}});
    s->accept({GeneratedToken{.request_id = 1, .token_id = f->token("2")}});
  }
  gpu::StepBatch recompute;  // the whole context again in one span, sampling at its end
  recompute.seqs = {{.seq_id = 1, .num_tokens = 20, .sample = true, .sampling_index = 0}};
  recompute.sampling.resize(1);
  gpu::StepBatch decode = batch_of_three();
  ASSERT_EQ(preempted.fill_bitmasks(recompute), 1);
  ASSERT_EQ(never.fill_bitmasks(decode), 1);
  EXPECT_EQ(recompute.token_bitmask, decode.token_bitmask);
}

}  // namespace
}  // namespace troupe::scheduler
