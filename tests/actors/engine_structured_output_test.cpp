// Structured output end to end in process (issue 19), on the real default model: the grammar is
// compiled on the prompt worker, its bitmask filled by the scheduler actor every step and
// applied by the CPU sampler, and the grammar's end ends the output ("stop").
#include "actors/engine/engine.hpp"

#include <cctype>
#include <set>

#include <gtest/gtest.h>
#include <simdjson.h>

#include "tests/actors/engine_test_support.hpp"

namespace troupe::engine::testing {
namespace {

using model::grammar::GrammarSpec;

GenerateRequest constrained_chat(std::string user, GrammarSpec spec, int32_t max_tokens,
                                 float temperature = 0.0f, uint64_t seed = 0) {
  GenerateRequest request = greedy_chat(std::move(user), max_tokens);
  request.sampling.temperature = temperature;
  request.sampling.seed = seed;
  request.structured_output = std::move(spec);
  request.structured_output_field = "structured_outputs";
  return request;
}


const char* kPersonSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":24},"age":{"type":"integer"},"city":{"type":"string","maxLength":24}},
  "required":["name","age"]})";

void expect_person(const std::string& text) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  ASSERT_EQ(parser.parse(text).get(root), simdjson::SUCCESS) << text;
  ASSERT_TRUE(root.is_object()) << text;
  simdjson::dom::element name;
  simdjson::dom::element age;
  ASSERT_EQ(root["name"].get(name), simdjson::SUCCESS) << text;
  EXPECT_TRUE(name.is_string()) << text;
  ASSERT_EQ(root["age"].get(age), simdjson::SUCCESS) << text;
  EXPECT_TRUE(age.is_int64() || age.is_uint64()) << text;
  for (const simdjson::dom::key_value_pair entry : simdjson::dom::object(root)) {
    const std::string_view key = entry.key;
    EXPECT_TRUE(key == "name" || key == "age" || key == "city") << text;
  }
}

bool three_digits(const std::string& text) {
  return text.size() == 3 && std::isdigit(static_cast<unsigned char>(text[0])) &&
         std::isdigit(static_cast<unsigned char>(text[1])) &&
         std::isdigit(static_cast<unsigned char>(text[2]));
}

#ifdef TROUPE_HAVE_XGRAMMAR

TEST(EngineStructuredOutput, JsonSchemaGreedyAndSampledParseAndMatch) {
  TROUPE_REQUIRE_MODEL();
  auto engine = Engine::start(test_config());
  const std::string prompt = "Describe a fictional person as JSON with their name, age and city.";
  const Answer greedy = run_to_end(*engine, constrained_chat(prompt, GrammarSpec::json_schema(kPersonSchema), 120));
  ASSERT_FALSE(greedy.error) << greedy.error->message;
  EXPECT_EQ(greedy.finish_reason, "stop") << greedy.text;
  expect_person(greedy.text);
  for (uint64_t seed : {1u, 2u, 3u}) {
    const Answer sampled =
        run_to_end(*engine, constrained_chat(prompt, GrammarSpec::json_schema(kPersonSchema), 120, 1.0f, seed));
    ASSERT_FALSE(sampled.error) << sampled.error->message;
    EXPECT_EQ(sampled.finish_reason, "stop") << sampled.text;
    expect_person(sampled.text);
  }
  // Any JSON object: this 135M model tends to nest objects until max_tokens, so the check is
  // that the output is an object from its first byte, and parses whenever it ended by itself.
  const Answer object = run_to_end(*engine, constrained_chat("Describe a cat as a JSON object.",
                                                      GrammarSpec::json_object(), 60));
  ASSERT_FALSE(object.error) << object.error->message;
  ASSERT_FALSE(object.text.empty());
  EXPECT_EQ(object.text.front(), '{') << object.text;
  if (object.finish_reason == "stop") {
    simdjson::dom::parser parser;
    simdjson::dom::element root;
    ASSERT_EQ(parser.parse(object.text).get(root), simdjson::SUCCESS) << object.text;
    EXPECT_TRUE(root.is_object()) << object.text;
  } else {
    EXPECT_EQ(object.finish_reason, "length");
  }
  const EngineStats stats = engine->stats();
  EXPECT_GT(stats.structured_output.num_masked_rows, 0u);
  // The mask's cost per step, as measured on this machine (README, bench/RESULTS.md).
  std::printf("[mask] %llu masked steps, %llu rows, %.3f ms per masked step (max %.3f ms)\n",
              static_cast<unsigned long long>(stats.structured_output.num_masked_steps),
              static_cast<unsigned long long>(stats.structured_output.num_masked_rows),
              stats.structured_output.mask_fill_ms_total /
                  std::max<double>(1.0, static_cast<double>(stats.structured_output.num_masked_steps)),
              stats.structured_output.mask_fill_ms_max);
  EXPECT_TRUE(wait_idle(*engine));
}

TEST(EngineStructuredOutput, RegexGivesExactlyThreeDigitsGreedyAndSampled) {
  TROUPE_REQUIRE_MODEL();
  auto engine = Engine::start(test_config());
  for (float temperature : {0.0f, 1.0f}) {
    const Answer answer = run_to_end(*engine, constrained_chat("Pick a number.", GrammarSpec::regex("[0-9]{3}"),
                                                        16, temperature, 42));
    ASSERT_FALSE(answer.error) << answer.error->message;
    EXPECT_TRUE(three_digits(answer.text)) << "'" << answer.text << "'";
    EXPECT_EQ(answer.finish_reason, "stop");
  }
}

TEST(EngineStructuredOutput, ChoiceGivesOneOfTheChoicesForEveryChoiceOfN) {
  TROUPE_REQUIRE_MODEL();
  auto engine = Engine::start(test_config());
  const std::vector<std::string> colors = {"red", "green", "blue"};
  const std::set<std::string> allowed(colors.begin(), colors.end());
  const Answer greedy = run_to_end(*engine, constrained_chat("What color is the sky?", GrammarSpec::choice(colors), 16));
  ASSERT_FALSE(greedy.error) << greedy.error->message;
  EXPECT_TRUE(allowed.count(greedy.text)) << "'" << greedy.text << "'";
  EXPECT_EQ(greedy.finish_reason, "stop");

  // n = 3 at temperature 1: each choice its own matcher over the one compiled grammar.
  GenerateRequest request = constrained_chat("Name a color.", GrammarSpec::choice(colors), 16, 1.0f, 5);
  request.n = 3;
  request.sampling.logprobs = false;
  auto sink = std::make_shared<RecordingSink>();
  engine->submit(std::move(request), sink);
  ASSERT_TRUE(sink->wait());
  ASSERT_FALSE(sink->error()) << sink->error()->message;
  ASSERT_EQ(sink->choice_ends().size(), 3u);
  for (const ChoiceEnd& end : sink->choice_ends()) EXPECT_EQ(end.finish_reason, "stop");
  EXPECT_TRUE(wait_idle(*engine));
}

TEST(EngineStructuredOutput, WithIgnoreEosTheGrammarsEndStillEndsTheOutput) {
  TROUPE_REQUIRE_MODEL();
  auto engine = Engine::start(test_config());
  GenerateRequest request = constrained_chat("Pick a number.", GrammarSpec::regex("[0-9]{3}"), 32);
  request.stop.ignore_eos = true;
  const Answer answer = run_to_end(*engine, std::move(request));
  ASSERT_FALSE(answer.error) << answer.error->message;
  EXPECT_TRUE(three_digits(answer.text)) << "'" << answer.text << "'";
  EXPECT_EQ(answer.finish_reason, "stop");
}

TEST(EngineStructuredOutput, UnconstrainedNeighboursAreUnchanged) {
  TROUPE_REQUIRE_MODEL();
  auto engine = Engine::start(test_config());
  const GenerateRequest plain = greedy_chat("Name a planet.", 12);
  auto alone = std::make_shared<RecordingSink>();
  engine->submit(plain, alone);
  ASSERT_TRUE(alone->wait());
  std::vector<std::shared_ptr<RecordingSink>> constrained;
  for (int i = 0; i < 3; ++i) {
    constrained.push_back(std::make_shared<RecordingSink>());
    engine->submit(constrained_chat("Describe a person as JSON.", GrammarSpec::json_schema(kPersonSchema), 60),
                   constrained.back());
  }
  auto together = std::make_shared<RecordingSink>();
  engine->submit(plain, together);
  ASSERT_TRUE(together->wait());
  for (auto& sink : constrained) ASSERT_TRUE(sink->wait());
  EXPECT_EQ(together->token_ids(), alone->token_ids());
  EXPECT_TRUE(wait_idle(*engine));
}

// Issue 19's batch invariance at full size: 16 constrained requests (JSON schemas, regexes and
// choices; greedy and sampled) and 16 unconstrained ones (greedy and seeded) submitted at once,
// so their steps mix masked and unmasked rows: every unconstrained output is token for token
// what it is alone, and every constrained one is what it is alone too.
TEST(EngineStructuredOutput, SixteenConstrainedAndSixteenPlainInOneBatch) {
  TROUPE_REQUIRE_MODEL();
  auto engine = Engine::start(test_config());
  const char* kTopics[16] = {"a planet", "the ocean", "a cat", "coffee", "the moon", "a river",
                             "bread", "a forest", "winter", "a violin", "the desert", "a bridge",
                             "rain", "a library", "chess", "a volcano"};
  const auto plain = [&](int i) {
    GenerateRequest r = greedy_chat(std::string("Tell me about ") + kTopics[i] + ".", 20);
    if (i % 2 == 1) {
      r.sampling.temperature = 0.8f;
      r.sampling.seed = 100 + static_cast<uint64_t>(i);
    }
    return r;
  };
  const auto constrained = [&](int i) {
    const float temperature = i % 2 == 0 ? 0.0f : 1.0f;
    const uint64_t seed = 200 + static_cast<uint64_t>(i);
    switch (i % 4) {
      case 0:
      case 1:
        return constrained_chat(std::string("Describe a person who likes ") + kTopics[i] + " as JSON.",
                                GrammarSpec::json_schema(kPersonSchema), 48, temperature, seed);
      case 2:
        return constrained_chat(std::string("How many words describe ") + kTopics[i] + "?",
                                GrammarSpec::regex("[0-9]{1,3}"), 8, temperature, seed);
      default:
        return constrained_chat(std::string("Is ") + kTopics[i] + " big or small?",
                                GrammarSpec::choice({"big", "small", "medium"}), 8, temperature, seed);
    }
  };
  std::vector<std::vector<int32_t>> plain_alone, constrained_alone;
  for (int i = 0; i < 16; ++i) {
    for (const bool is_plain : {true, false}) {
      auto sink = std::make_shared<RecordingSink>();
      engine->submit(is_plain ? plain(i) : constrained(i), sink);
      ASSERT_TRUE(sink->wait());
      ASSERT_FALSE(sink->error()) << sink->error()->message;
      (is_plain ? plain_alone : constrained_alone).push_back(sink->token_ids());
    }
  }
  const uint64_t steps_before = engine->stats().num_steps;
  std::vector<std::shared_ptr<RecordingSink>> plain_sinks, constrained_sinks;
  for (int i = 0; i < 16; ++i) {
    constrained_sinks.push_back(std::make_shared<RecordingSink>());
    engine->submit(constrained(i), constrained_sinks.back());
    plain_sinks.push_back(std::make_shared<RecordingSink>());
    engine->submit(plain(i), plain_sinks.back());
  }
  size_t tokens_together = 0;
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(plain_sinks[i]->wait());
    ASSERT_TRUE(constrained_sinks[i]->wait());
    ASSERT_FALSE(plain_sinks[i]->error()) << plain_sinks[i]->error()->message;
    ASSERT_FALSE(constrained_sinks[i]->error()) << constrained_sinks[i]->error()->message;
    EXPECT_EQ(plain_sinks[i]->token_ids(), plain_alone[i]) << "unconstrained request " << i;
    EXPECT_EQ(constrained_sinks[i]->token_ids(), constrained_alone[i]) << "constrained request " << i;
    tokens_together += plain_sinks[i]->token_ids().size() + constrained_sinks[i]->token_ids().size();
  }
  // They ran together: on average many sequences per step (one at a time would be one).
  const uint64_t steps_together = engine->stats().num_steps - steps_before;
  std::printf("[16+16] %zu tokens in %llu steps\n", tokens_together,
              static_cast<unsigned long long>(steps_together));
  EXPECT_LT(steps_together * 4, tokens_together);
  EXPECT_TRUE(wait_idle(*engine));
}

// Constrained sequences preempted for KV room and recomputed sample exactly what each samples
// alone: a matcher keeps the state of the tokens its sequence keeps. A small KV pool makes the
// preemptions certain whatever the timing (four sequences cannot all grow in it at once).
TEST(EngineStructuredOutput, PreemptedConstrainedSequencesGiveTheirSoloOutput) {
  TROUPE_REQUIRE_MODEL();
  EngineConfig config = test_config();
  config.scheduler.num_blocks = 10;  // 160 tokens of KV: one sequence fits, four do not
  config.scheduler.enable_prefix_caching = false;
  auto engine = Engine::start(config);
  const std::string prompt = "Describe a fictional person as JSON with their name, age and city.";
  const auto request = [&](uint64_t seed) {
    return constrained_chat(prompt, GrammarSpec::json_schema(kPersonSchema), 100, 1.0f, seed);
  };
  std::vector<std::vector<int32_t>> solo;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    auto sink = std::make_shared<RecordingSink>();
    engine->submit(request(seed), sink);
    ASSERT_TRUE(sink->wait());
    ASSERT_FALSE(sink->error()) << sink->error()->message;
    solo.push_back(sink->token_ids());
  }
  EXPECT_EQ(engine->stats().num_preemptions, 0u);
  std::vector<std::shared_ptr<RecordingSink>> together;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    together.push_back(std::make_shared<RecordingSink>());
    engine->submit(request(seed), together.back());
  }
  for (size_t i = 0; i < together.size(); ++i) {
    ASSERT_TRUE(together[i]->wait());
    ASSERT_FALSE(together[i]->error()) << together[i]->error()->message;
    EXPECT_EQ(together[i]->token_ids(), solo[i]) << i;
    if (together[i]->completion()->finish_reason == "stop") expect_person(together[i]->text());
  }
  EXPECT_GE(engine->stats().num_preemptions, 1u);
  EXPECT_TRUE(wait_idle(*engine));
}

TEST(EngineStructuredOutput, AGrammarThatDoesNotCompileIsA400NamingTheField) {
  TROUPE_REQUIRE_MODEL();
  auto engine = Engine::start(test_config());
  GenerateRequest request = constrained_chat("x", GrammarSpec::regex("[0-9"), 8);
  request.structured_output_field = "guided_regex";
  const Answer bad_regex = run_to_end(*engine, std::move(request));
  ASSERT_TRUE(bad_regex.error);
  EXPECT_EQ(bad_regex.error->code, ErrorCode::kInvalidRequest);
  EXPECT_EQ(bad_regex.error->param, "guided_regex");
  const Answer bad_schema = run_to_end(*engine, constrained_chat("x", GrammarSpec::json_schema("{\"type\":"), 8));
  ASSERT_TRUE(bad_schema.error);
  EXPECT_EQ(bad_schema.error->param, "structured_outputs");
  GenerateRequest with_min_tokens = constrained_chat("x", GrammarSpec::regex("[0-9]{3}"), 8);
  with_min_tokens.sampling.min_tokens = 2;
  const Answer min_tokens = run_to_end(*engine, std::move(with_min_tokens));
  ASSERT_TRUE(min_tokens.error);
  EXPECT_EQ(min_tokens.error->param, "min_tokens");
  EXPECT_TRUE(wait_idle(*engine));
}

// The compiler's bounds come from the config (structured_output.max_grammar_bytes): a spec over
// it is a 400 naming the field, refused before compiling.
TEST(EngineStructuredOutput, TheGrammarSizeBoundComesFromTheConfig) {
  TROUPE_REQUIRE_MODEL();
  EngineConfig config = test_config();
  config.structured_output.max_grammar_bytes = 16;
  auto engine = Engine::start(config);
  const Answer small = run_to_end(*engine, constrained_chat("Pick a number.", GrammarSpec::regex("[0-9]{3}"), 8));
  ASSERT_FALSE(small.error) << small.error->message;
  const Answer large = run_to_end(*engine, constrained_chat("Pick a number.", GrammarSpec::regex("(one|two|three|four)"), 8));
  ASSERT_TRUE(large.error);
  EXPECT_EQ(large.error->param, "structured_outputs");
  EXPECT_NE(large.error->message.find("too large"), std::string::npos) << large.error->message;
  EXPECT_TRUE(wait_idle(*engine));
}

#else  // TROUPE_HAVE_XGRAMMAR

TEST(EngineStructuredOutput, WithoutXgrammarAConstrainedRequestIsA400NamingTheField) {
  TROUPE_REQUIRE_MODEL();
  auto engine = Engine::start(test_config());
  const Answer answer = run_to_end(*engine, constrained_chat("x", GrammarSpec::regex("[0-9]{3}"), 8));
  ASSERT_TRUE(answer.error);
  EXPECT_EQ(answer.error->param, "structured_outputs");
  EXPECT_NE(answer.error->message.find("not built"), std::string::npos);
}

#endif

}  // namespace
}  // namespace troupe::engine::testing
