// The output processor (actors/ingress/output_processor.cpp) on hand-made scheduler events: text
// deltas across UTF-8 splits and held-back stop strings, min_tokens, the end of each choice and
// the request's Completion, a client that leaves, n choices as one request, errors.
#include "actors/ingress/output_processor.hpp"

#include <gtest/gtest.h>

#include "tests/net/test_tokenizer.hpp"

namespace troupe::ingress {
namespace {

using engine::ChoiceEnd;
using engine::Completion;
using engine::TokenDelta;
using scheduler::FinishReason;

// The test tokenizer plus the two halves of "é" (bytes C3 A9, written in GPT-2's byte
// alphabet as "Ã" and "©") and one token holding a whole stop string with text around it.
model::Tokenizer make_tokenizer() {
  return net::testing::make_test_tokenizer({"\xC3\x83", "\xC2\xA9", "aENDb"});
}

class OutputProcessorTest : public ::testing::Test {
 protected:
  static constexpr engine::RequestId kId = 10;

  int32_t id_of(std::string_view text) const { return *tokenizer_.find_token(text); }

  // The next token of sequence `sequence` (its count of generated tokens kept here).
  scheduler::GeneratedToken token(engine::RequestId sequence, std::string_view text) {
    scheduler::GeneratedToken t;
    t.request_id = sequence;
    t.token_id = id_of(text);
    t.num_generated_tokens = ++generated_[sequence];
    t.logprob = -0.25f;
    return t;
  }
  scheduler::FinishedSequence ended(engine::RequestId sequence, FinishReason reason) {
    scheduler::FinishedSequence f;
    f.request_id = sequence;
    f.reason = reason;
    f.num_prompt_tokens = 4;
    f.num_generated_tokens = generated_[sequence];
    return f;
  }
  OutputProcessor::Outputs step(std::vector<scheduler::GeneratedToken> tokens,
                                std::vector<scheduler::FinishedSequence> finished = {}) {
    now_ += std::chrono::milliseconds(10);
    return processor_.process(tokens, finished, now_);
  }
  void add(OutputOptions options) {
    processor_.add(kId, std::move(options), start_);
    processor_.set_prompt_tokens(kId, 4);
  }

  // The text of every delta, in order, joined with '|'.
  static std::string texts(const OutputProcessor::Outputs& out) {
    std::string joined;
    for (const RequestOutput& o : out.outputs) {
      if (const auto* delta = std::get_if<TokenDelta>(&o.event)) joined += delta->text + "|";
    }
    return joined;
  }
  static const ChoiceEnd* choice_end(const OutputProcessor::Outputs& out, int32_t index) {
    for (const RequestOutput& o : out.outputs) {
      const auto* end = std::get_if<ChoiceEnd>(&o.event);
      if (end != nullptr && end->index == index) return end;
    }
    return nullptr;
  }
  static const Completion* completion(const OutputProcessor::Outputs& out) {
    for (const RequestOutput& o : out.outputs) {
      if (const auto* c = std::get_if<Completion>(&o.event)) return c;
    }
    return nullptr;
  }

  model::Tokenizer tokenizer_ = make_tokenizer();
  OutputProcessor processor_{tokenizer_};
  Clock::time_point start_ = Clock::time_point{} + std::chrono::seconds(100);
  Clock::time_point now_ = start_;
  std::unordered_map<engine::RequestId, int32_t> generated_;
};

TEST_F(OutputProcessorTest, TokensBecomeDeltasThenTheChoiceEndsThenTheRequest) {
  add({});
  OutputProcessor::Outputs out = step({token(kId, "H"), token(kId, "i")});
  EXPECT_EQ(texts(out), "H|i|");
  EXPECT_EQ(std::get<TokenDelta>(out.outputs[1].event).num_generated_tokens, 2);
  ASSERT_EQ(out.time_to_first_token_ms.size(), 1u);
  EXPECT_DOUBLE_EQ(out.time_to_first_token_ms[0], 10.0);
  EXPECT_EQ(completion(out), nullptr);

  out = step({}, {ended(kId, FinishReason::kEos)});
  ASSERT_EQ(out.outputs.size(), 2u);
  const auto& end = std::get<ChoiceEnd>(out.outputs[0].event);
  EXPECT_EQ(end.finish_reason, "stop");
  EXPECT_EQ(end.completion_tokens, 2);
  const auto& done = std::get<Completion>(out.outputs[1].event);
  EXPECT_EQ(done.finish_reason, "stop");
  EXPECT_EQ(done.usage.prompt_tokens, 4);
  EXPECT_EQ(done.usage.completion_tokens, 2);
  EXPECT_DOUBLE_EQ(done.timings.total_ms, 20.0);
  EXPECT_EQ(out.forgotten, std::vector<engine::RequestId>{kId});
  EXPECT_FALSE(processor_.contains(kId));
}

TEST_F(OutputProcessorTest, ACharacterSplitAcrossTokensComesWhole) {
  add({});
  EXPECT_EQ(texts(step({token(kId, "\xC3\x83")})), "");  // half of "é": nothing yet
  EXPECT_EQ(texts(step({token(kId, "\xC2\xA9")})), "\xC3\xA9|");
}

TEST_F(OutputProcessorTest, AHalfCharacterLeftAtTheEndBecomesAReplacementCharacter) {
  add({});
  step({token(kId, "x"), token(kId, "\xC3\x83")});
  const OutputProcessor::Outputs out = step({}, {ended(kId, FinishReason::kMaxTokens)});
  EXPECT_EQ(texts(out), "\xEF\xBF\xBD|");
  EXPECT_EQ(std::get<TokenDelta>(out.outputs[0].event).num_generated_tokens, 2);
  EXPECT_EQ(choice_end(out, 0)->finish_reason, "length");
}

TEST_F(OutputProcessorTest, AStopStringSpanningDeltasIsHeldThenEndsTheChoice) {
  add({.stop_strings = {"END"}});
  EXPECT_EQ(texts(step({token(kId, "o"), token(kId, "k"), token(kId, "E")})), "o|k|");
  EXPECT_EQ(texts(step({token(kId, "N")})), "");
  const OutputProcessor::Outputs out = step({token(kId, "D"), token(kId, "z")});
  EXPECT_EQ(texts(out), "");  // neither the stop string nor what follows it
  EXPECT_EQ(out.sequences_to_finish, std::vector<engine::RequestId>{kId});
  EXPECT_EQ(choice_end(out, 0)->finish_reason, "stop");
  ASSERT_NE(completion(out), nullptr);
  EXPECT_EQ(completion(out)->usage.completion_tokens, 5);  // as far as the client saw
  EXPECT_TRUE(processor_.answered(kId));
  EXPECT_TRUE(processor_.contains(kId));  // until the scheduler confirms

  const OutputProcessor::Outputs confirmed = step({}, {ended(kId, FinishReason::kStopString)});
  EXPECT_TRUE(confirmed.outputs.empty());
  EXPECT_EQ(confirmed.forgotten, std::vector<engine::RequestId>{kId});
}

// Speculative decoding: one step may bring several tokens of a sequence (accepted drafts and
// the token after them). A stop string inside the run ends the choice there; the tokens after
// it, which the scheduler generated and counts until it learns of the stop, reach nobody.
TEST_F(OutputProcessorTest, AStopStringInsideAMultiTokenStepCutsTheRest) {
  add({.stop_strings = {"EN"}});
  const OutputProcessor::Outputs out =
      step({token(kId, "o"), token(kId, "E"), token(kId, "N"), token(kId, "k"), token(kId, "z")});
  EXPECT_EQ(texts(out), "o|");
  EXPECT_EQ(out.sequences_to_finish, std::vector<engine::RequestId>{kId});
  ASSERT_NE(completion(out), nullptr);
  EXPECT_EQ(completion(out)->usage.completion_tokens, 3);  // o E N: as far as the client saw
  const OutputProcessor::Outputs confirmed = step({}, {ended(kId, FinishReason::kStopString)});
  EXPECT_TRUE(confirmed.outputs.empty());
}

TEST_F(OutputProcessorTest, AStopStringInsideTheLastTokenCutsItsText) {
  add({.stop_strings = {"END"}});
  const OutputProcessor::Outputs out = step({token(kId, "aENDb")});
  EXPECT_EQ(texts(out), "a|");
  EXPECT_EQ(choice_end(out, 0)->finish_reason, "stop");
}

TEST_F(OutputProcessorTest, AHeldBackPartialStopStringIsSentWhenTheSequenceEnds) {
  add({.stop_strings = {"END"}});
  EXPECT_EQ(texts(step({token(kId, "E"), token(kId, "N")})), "");
  const OutputProcessor::Outputs out = step({}, {ended(kId, FinishReason::kMaxTokens)});
  EXPECT_EQ(texts(out), "EN|");
  EXPECT_EQ(choice_end(out, 0)->finish_reason, "length");
  EXPECT_EQ(completion(out)->finish_reason, "length");
}

TEST_F(OutputProcessorTest, StopStringsCountOnlyAfterMinTokens) {
  add({.stop_strings = {"a"}, .min_tokens = 2});
  EXPECT_EQ(texts(step({token(kId, "a"), token(kId, "a")})), "a|a|");
  const OutputProcessor::Outputs out = step({token(kId, "a")});
  EXPECT_EQ(texts(out), "");
  EXPECT_EQ(out.sequences_to_finish, std::vector<engine::RequestId>{kId});
}

TEST_F(OutputProcessorTest, IncludedStopStringsStayInTheText) {
  add({.stop_strings = {"END"}, .include_stop_string = true});
  EXPECT_EQ(texts(step({token(kId, "aENDb")})), "aEND|");
}

TEST_F(OutputProcessorTest, LogprobsComeWithEveryToken) {
  add({.want_logprobs = true});
  scheduler::GeneratedToken t = token(kId, "\xC3\x83");
  t.top_logprobs = {{id_of("\xC3\x83"), -0.25f}, {id_of("x"), -2.0f}};
  const OutputProcessor::Outputs out = step({t});
  ASSERT_EQ(out.outputs.size(), 1u);  // no text yet, but a token
  const TokenDelta& delta = std::get<TokenDelta>(out.outputs[0].event);
  EXPECT_EQ(delta.text, "");
  ASSERT_EQ(delta.tokens.size(), 1u);
  EXPECT_EQ(delta.tokens[0].token_id, id_of("\xC3\x83"));
  EXPECT_EQ(delta.tokens[0].text, "\xC3");  // the token's raw byte
  EXPECT_FLOAT_EQ(delta.tokens[0].logprob, -0.25f);
  ASSERT_EQ(delta.tokens[0].top_logprobs.size(), 2u);
  EXPECT_EQ(delta.tokens[0].top_logprobs[1].first, id_of("x"));
}

TEST_F(OutputProcessorTest, AClientThatLeavesGetsNoMoreTextButItsCancelledEnd) {
  add({});
  step({token(kId, "a")});
  EXPECT_EQ(processor_.client_gone(kId), std::vector<engine::RequestId>{kId});
  EXPECT_TRUE(processor_.client_gone(kId).empty());  // asked once
  EXPECT_TRUE(step({token(kId, "b")}).outputs.empty());
  const OutputProcessor::Outputs out = step({}, {ended(kId, FinishReason::kCancelled)});
  EXPECT_EQ(texts(out), "");
  EXPECT_EQ(choice_end(out, 0)->finish_reason, "cancelled");
  EXPECT_EQ(completion(out)->finish_reason, "cancelled");
  EXPECT_EQ(out.forgotten, std::vector<engine::RequestId>{kId});
}

TEST_F(OutputProcessorTest, NChoicesAreOneRequestWithOneCompletion) {
  add({.stop_strings = {"!"}, .num_choices = 3});
  const engine::RequestId c0 = kId, c1 = kId + 1, c2 = kId + 2;
  OutputProcessor::Outputs out = step({token(c0, "a"), token(c1, "b"), token(c2, "c")});
  ASSERT_EQ(out.outputs.size(), 3u);
  for (int32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(std::get<TokenDelta>(out.outputs[static_cast<size_t>(i)].event).index, i);
  }
  EXPECT_EQ(out.time_to_first_token_ms.size(), 1u);  // one request

  out = step({token(c0, "a"), token(c1, "!")}, {ended(c2, FinishReason::kMaxTokens)});
  EXPECT_EQ(out.sequences_to_finish, std::vector<engine::RequestId>{c1});
  EXPECT_EQ(choice_end(out, 1)->finish_reason, "stop");
  EXPECT_EQ(choice_end(out, 2)->finish_reason, "length");
  EXPECT_EQ(completion(out), nullptr);  // choice 0 still runs
  EXPECT_EQ(processor_.open_sequences(kId), std::vector<engine::RequestId>{c0});

  out = step({}, {ended(c0, FinishReason::kEos), ended(c1, FinishReason::kStopString)});
  ASSERT_NE(completion(out), nullptr);
  EXPECT_EQ(completion(out)->finish_reason, "length");  // one choice hit its limit
  EXPECT_EQ(completion(out)->usage.prompt_tokens, 4);     // counted once
  EXPECT_EQ(completion(out)->usage.completion_tokens, 2 + 2 + 1);
  EXPECT_EQ(out.forgotten, std::vector<engine::RequestId>{kId});
  EXPECT_EQ(processor_.request_of(c2), std::nullopt);
}

TEST_F(OutputProcessorTest, AnyCancelledChoiceMakesTheRequestCancelled) {
  add({.num_choices = 2});
  const OutputProcessor::Outputs out =
      step({}, {ended(kId, FinishReason::kEos), ended(kId + 1, FinishReason::kCancelled)});
  EXPECT_EQ(completion(out)->finish_reason, "cancelled");
}

TEST_F(OutputProcessorTest, AnErrorClosesTheRequestAndNamesItsOpenSequences) {
  add({.num_choices = 2});
  step({token(kId, "a"), token(kId + 1, "b")}, {ended(kId + 1, FinishReason::kEos)});
  std::vector<engine::RequestId> to_cancel;
  EXPECT_TRUE(processor_.close_with_error(kId, to_cancel));
  EXPECT_EQ(to_cancel, std::vector<engine::RequestId>{kId});
  EXPECT_FALSE(processor_.close_with_error(kId, to_cancel));  // answered once
  const OutputProcessor::Outputs out = step({token(kId, "c")}, {ended(kId, FinishReason::kCancelled)});
  EXPECT_TRUE(out.outputs.empty());
  EXPECT_EQ(out.forgotten, std::vector<engine::RequestId>{kId});
}

TEST_F(OutputProcessorTest, TimingsComeFromTheStampsGiven) {
  add({});
  processor_.note_scheduled(std::vector<engine::RequestId>{kId}, start_ + std::chrono::milliseconds(3));
  step({token(kId, "a")});  // at +10 ms
  step({token(kId, "b")});  // at +20 ms
  const OutputProcessor::Outputs out = step({}, {ended(kId, FinishReason::kEos)});  // +30 ms
  const Completion* done = completion(out);
  ASSERT_NE(done, nullptr);
  EXPECT_DOUBLE_EQ(done->timings.queue_ms, 3.0);
  EXPECT_DOUBLE_EQ(done->timings.time_to_first_token_ms, 10.0);
  EXPECT_DOUBLE_EQ(done->timings.total_ms, 30.0);
  EXPECT_DOUBLE_EQ(done->timings.decode_tokens_per_s, 1 / 0.020);
}

TEST_F(OutputProcessorTest, HeldKvRidesOnTheCompletion) {
  add({});
  step({token(kId, "a")});
  scheduler::FinishedSequence f = ended(kId, FinishReason::kMaxTokens);
  f.held_kv = scheduler::HeldKv{{3, 4}, 17, id_of("a")};
  const OutputProcessor::Outputs out = step({}, {f});
  ASSERT_TRUE(out.outputs.back().held_kv.has_value());
  EXPECT_EQ(out.outputs.back().held_kv->num_tokens, 17);
}

TEST_F(OutputProcessorTest, CancelledBeforeStartIsACancelledCompletion) {
  add({.num_choices = 2});
  const Completion done = processor_.cancelled_before_start(kId, start_ + std::chrono::milliseconds(5));
  EXPECT_EQ(done.finish_reason, "cancelled");
  EXPECT_EQ(done.usage.completion_tokens, 0);
  EXPECT_DOUBLE_EQ(done.timings.total_ms, 5.0);
  processor_.forget(kId);
  EXPECT_EQ(processor_.size(), 0u);
  EXPECT_EQ(processor_.request_of(kId + 1), std::nullopt);
}

TEST_F(OutputProcessorTest, UnknownSequencesAreIgnored) {
  add({});
  const OutputProcessor::Outputs out = step({token(99, "a")}, {ended(98, FinishReason::kEos)});
  EXPECT_TRUE(out.outputs.empty());
  EXPECT_TRUE(out.forgotten.empty());
}

// Issue 37: an echoed, scored prompt rides on each choice's first delta, before its text; the
// first prompt token carries no logprob.
TEST_F(OutputProcessorTest, AScoredPromptComesFirstInEachChoice) {
  add({.num_choices = 2, .echo = true, .prompt_logprobs = 1});
  processor_.set_prompt(kId, {id_of("H"), id_of("i"), id_of("H")}, "HiH");
  scheduler::StepUpdate update;
  for (engine::RequestId sequence : {kId, kId + 1}) {
    update.prompt_logprobs.push_back(
        {sequence, 0, {{id_of("i"), -1.5f, 3, {{id_of("H"), -0.5f}}}, {id_of("H"), -0.25f, 1, {}}}});
  }
  update.tokens = {token(kId, "i")};
  now_ += std::chrono::milliseconds(10);
  OutputProcessor::Outputs out = processor_.process(update, now_);
  ASSERT_EQ(out.outputs.size(), 1u);
  const auto& delta = std::get<TokenDelta>(out.outputs[0].event);
  EXPECT_EQ(delta.text, "i");
  ASSERT_TRUE(delta.prompt.has_value());
  EXPECT_EQ(delta.prompt->text, "HiH");
  EXPECT_TRUE(delta.prompt->scored);
  ASSERT_EQ(delta.prompt->tokens.size(), 3u);
  EXPECT_FALSE(delta.prompt->tokens[0].has_logprob);
  EXPECT_EQ(delta.prompt->tokens[1].logprob, -1.5f);
  EXPECT_EQ(delta.prompt->tokens[1].rank, 3);
  EXPECT_EQ(delta.prompt->tokens[1].top_logprobs.size(), 1u);
  EXPECT_EQ(delta.prompt->tokens[2].text, "H");
  // Later deltas of that choice carry no prompt; the other choice's first one does.
  out = step({token(kId, "H"), token(kId + 1, "H")});
  ASSERT_EQ(out.outputs.size(), 2u);
  EXPECT_FALSE(std::get<TokenDelta>(out.outputs[0].event).prompt.has_value());
  EXPECT_TRUE(std::get<TokenDelta>(out.outputs[1].event).prompt.has_value());
}

// Echo with max_tokens 0: nothing generated, the prompt goes out with the choice's end, which
// reads "length" (vLLM's answer).
TEST_F(OutputProcessorTest, APromptOnlyChoiceEchoesAtItsEnd) {
  add({.echo = true, .prompt_logprobs = 0});
  processor_.set_prompt(kId, {id_of("H"), id_of("i")}, "Hi");
  scheduler::StepUpdate update;
  update.prompt_logprobs.push_back({kId, 0, {{id_of("i"), -2.0f, 7, {}}}});
  update.finished.push_back(ended(kId, FinishReason::kPromptDone));
  now_ += std::chrono::milliseconds(10);
  const OutputProcessor::Outputs out = processor_.process(update, now_);
  ASSERT_EQ(out.outputs.size(), 3u);
  const auto& delta = std::get<TokenDelta>(out.outputs[0].event);
  EXPECT_TRUE(delta.text.empty());
  ASSERT_TRUE(delta.prompt.has_value());
  EXPECT_EQ(delta.prompt->tokens[1].logprob, -2.0f);
  EXPECT_EQ(std::get<ChoiceEnd>(out.outputs[1].event).finish_reason, "length");
  EXPECT_EQ(std::get<Completion>(out.outputs[2].event).usage.completion_tokens, 0);
}

// A cancelled echo request never had its prompt computed: nothing is echoed.
TEST_F(OutputProcessorTest, ACancelledEchoEchoesNothing) {
  add({.echo = true, .prompt_logprobs = 0});
  processor_.set_prompt(kId, {id_of("H"), id_of("i")}, "Hi");
  const OutputProcessor::Outputs out = step({}, {ended(kId, FinishReason::kCancelled)});
  for (const RequestOutput& o : out.outputs) EXPECT_FALSE(std::holds_alternative<TokenDelta>(o.event));
}

// An embeddings request: one vector per input, in input order, in the Completion.
TEST_F(OutputProcessorTest, EmbeddingsArriveInTheCompletionInInputOrder) {
  add({.num_choices = 2, .embedding = true});
  scheduler::StepUpdate update;
  update.embeddings = {{kId + 1, {3.0f, 4.0f}}, {kId, {1.0f, 2.0f}}};
  update.finished = {ended(kId + 1, FinishReason::kPromptDone), ended(kId, FinishReason::kPromptDone)};
  now_ += std::chrono::milliseconds(10);
  const OutputProcessor::Outputs out = processor_.process(update, now_);
  const Completion* done = completion(out);
  ASSERT_NE(done, nullptr);
  ASSERT_EQ(done->embeddings.size(), 2u);
  EXPECT_EQ(done->embeddings[0], (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(done->embeddings[1], (std::vector<float>{3.0f, 4.0f}));
  EXPECT_EQ(done->usage.prompt_tokens, 4);
  EXPECT_EQ(done->usage.completion_tokens, 0);
}

}  // namespace
}  // namespace troupe::ingress
