// Structured output over xgrammar (model/grammar/, issue 19) on SmolLM2's real 49,152-token
// vocabulary: the vocabulary as bytes, JSON object / JSON schema / regex / choice / EBNF grammars
// driven token by token, the masks they produce, rollback and reset, errors as values, and the
// compiler's LRU cache. Without the model file the SmolLM2 tests skip with a message.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <xgrammar/xgrammar.h>

#include "model/gguf.hpp"
#include "model/grammar/grammar_compiler.hpp"
#include "model/grammar/grammar_matcher.hpp"
#include "model/grammar/token_bitmask.hpp"
#include "model/grammar/tokenizer_info.hpp"
#include "model/tokenizer.hpp"
#include "model/tool_calling.hpp"
#include "tests/model/smollm2_tokenizer.hpp"

namespace troupe::model::grammar {
namespace {

// One compiler for the whole executable: building the vocabulary tables takes a moment.
GrammarCompiler* smollm2_compiler() {
  static const std::unique_ptr<GrammarCompiler> compiler =
      []() -> std::unique_ptr<GrammarCompiler> {
    const Tokenizer* tok = smollm2_tokenizer();
    if (tok == nullptr) return nullptr;
    return std::make_unique<GrammarCompiler>(TokenizerInfo::from_tokenizer(*tok));
  }();
  return compiler.get();
}

#define REQUIRE_SMOLLM2(tok, compiler)                                                 \
  const Tokenizer* tok = smollm2_tokenizer();                                          \
  GrammarCompiler* compiler = smollm2_compiler();                                      \
  if (tok == nullptr || compiler == nullptr) {                                         \
    GTEST_SKIP() << "model file not found at " << default_model_path()                 \
                 << " (set TROUPE_TEST_MODEL or run setup to place it under models/)"; \
  }                                                                                    \
  (void)tok;                                                                           \
  (void)compiler

constexpr const char* kPersonSchema =
    R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},)"
    R"("required":["name","age"]})";
constexpr const char* kPersonAnswer = R"({"name": "Ann", "age": 31})";

CompiledGrammar compile_ok(GrammarCompiler& compiler, const GrammarSpec& spec) {
  CompileResult r = compiler.compile(spec);
  EXPECT_TRUE(r.ok()) << r.error;
  if (!r.ok()) throw std::runtime_error(r.error);
  return *r.grammar;
}

std::vector<uint32_t> mask_of(GrammarMatcher& m) {
  std::vector<uint32_t> row(m.grammar().tokenizer().bitmask_num_words());
  m.fill_bitmask(row);
  return row;
}

std::vector<int32_t> allowed_ids(const std::vector<uint32_t>& row, size_t vocab_size) {
  std::vector<int32_t> ids;
  for (size_t t = 0; t < vocab_size; ++t) {
    if (token_allowed(row, static_cast<int32_t>(t))) ids.push_back(static_cast<int32_t>(t));
  }
  return ids;
}

int32_t id_of(const Tokenizer& tok, const std::string& text) {
  const std::vector<int32_t> ids = tok.encode(text, /*parse_special=*/false);
  EXPECT_EQ(ids.size(), 1u) << "'" << text << "' is not one token";
  return ids.empty() ? -1 : ids[0];
}

// Accepts every token of text (our tokenizer's encoding), checking the mask allowed each first.
void accept_text(const Tokenizer& tok, GrammarMatcher& m, const std::string& text) {
  for (int32_t id : tok.encode(text, /*parse_special=*/false)) {
    const std::vector<uint32_t> row = mask_of(m);
    ASSERT_TRUE(token_allowed(row, id))
        << "mask forbids token " << id << " '" << tok.token_piece(id) << "' of " << text;
    ASSERT_TRUE(m.accept_token(id)) << "token " << id << " '" << tok.token_piece(id) << "'";
  }
}

bool is_json_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

// ---- the vocabulary --------------------------------------------------------------------------

TEST(GrammarTokenizerInfo, SmolLM2VocabularyAsBytes) {
  REQUIRE_SMOLLM2(tok, compiler);
  const TokenizerInfo& info = compiler->tokenizer();
  EXPECT_EQ(info.vocab_size(), 49152u);
  EXPECT_EQ(info.bitmask_num_words(), 1536u);
  const int32_t im_end = *tok->find_token("<|im_end|>");
  const int32_t endoftext = *tok->find_token("<|endoftext|>");
  const int32_t im_start = *tok->find_token("<|im_start|>");
  const auto& stops = info.stop_token_ids();
  EXPECT_NE(std::find(stops.begin(), stops.end(), im_end), stops.end());
  EXPECT_NE(std::find(stops.begin(), stops.end(), endoftext), stops.end());
  EXPECT_TRUE(info.is_special(im_start)) << "a control token must never be produced as text";
  EXPECT_FALSE(info.is_special(im_end)) << "stop tokens are allowed at the grammar's end";
  EXPECT_EQ(info.token_bytes(id_of(*tok, " hello")), " hello");  // "Ġhello" in the GGUF
  EXPECT_EQ(info.token_bytes(id_of(*tok, "{")), "{");
  EXPECT_EQ(info.token_bytes(im_start), "");
  EXPECT_TRUE(info.is_special(-1));
  EXPECT_TRUE(info.is_special(49152));
}

TEST(GrammarTokenizerInfo, AgreesWithXgrammarByteLevelDecoding) {
  // We hand xgrammar decoded bytes (VocabType::RAW, see tokenizer_info.hpp); its own BYTE_LEVEL
  // decoder on the GGUF texts must give the same bytes for every normal token.
  REQUIRE_SMOLLM2(tok, compiler);
  std::vector<std::string> encoded;
  for (size_t id = 0; id < tok->vocab_size(); ++id) {
    encoded.emplace_back(tok->token_text(static_cast<int32_t>(id)));
  }
  const xgrammar::TokenizerInfo byte_level(encoded, xgrammar::VocabType::BYTE_LEVEL);
  const auto& decoded = byte_level.GetDecodedVocab();
  size_t num_normal = 0;
  for (size_t id = 0; id < tok->vocab_size(); ++id) {
    if (tok->token_type(static_cast<int32_t>(id)) != TokenType::kNormal) continue;
    ++num_normal;
    ASSERT_EQ(decoded[id], compiler->tokenizer().token_bytes(static_cast<int32_t>(id)))
        << "token " << id;
  }
  EXPECT_GT(num_normal, 49000u);
}

TEST(GrammarTokenizerInfo, SentencePieceSpacesAndByteTokens) {
  TokenizerVocab v;
  v.kind = TokenizerKind::kSentencePiece;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    v.tokens.push_back(name);
    v.token_types.push_back(TokenType::kByte);
  }
  for (const char* w : {"\xE2\x96\x81", "\xE2\x96\x81hi", "yes", "\xE2\x96\x81no"}) {
    v.tokens.push_back(w);
    v.token_types.push_back(TokenType::kNormal);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  const Tokenizer spm = Tokenizer::from_vocab(v);
  const TokenizerInfo info = TokenizerInfo::from_tokenizer(spm, /*vocab_size=*/300);
  EXPECT_EQ(info.vocab_size(), 300u);  // padded logits: ids past the vocabulary are special
  EXPECT_TRUE(info.is_special(299));
  EXPECT_EQ(info.stop_token_ids(), std::vector<int32_t>{2});
  EXPECT_TRUE(info.is_special(0));
  EXPECT_TRUE(info.is_special(1));
  EXPECT_EQ(info.token_bytes(3 + 0x0A), "\n");
  EXPECT_EQ(info.token_bytes(3 + 0xE2), "\xE2");
  EXPECT_EQ(info.token_bytes(*spm.find_token("\xE2\x96\x81hi")), " hi");
  EXPECT_EQ(info.token_bytes(*spm.find_token("\xE2\x96\x81")), " ");

  // A choice grammar over this vocabulary: " no" is one token, "yes" another.
  GrammarCompiler compiler(info);
  GrammarMatcher m(compile_ok(compiler, GrammarSpec::choice({"yes", " no"})));
  std::vector<uint32_t> row(info.bitmask_num_words());
  m.fill_bitmask(row);
  EXPECT_TRUE(token_allowed(row, *spm.find_token("yes")));
  EXPECT_TRUE(token_allowed(row, *spm.find_token("\xE2\x96\x81no")));
  EXPECT_TRUE(token_allowed(row, *spm.find_token("\xE2\x96\x81")));  // " " then byte tokens
  EXPECT_FALSE(token_allowed(row, *spm.find_token("\xE2\x96\x81hi")));
  EXPECT_FALSE(token_allowed(row, 2));
  EXPECT_TRUE(m.accept_token(*spm.find_token("\xE2\x96\x81no")));
  EXPECT_TRUE(m.is_completed());
  EXPECT_TRUE(m.accept_token(2));
  EXPECT_TRUE(m.is_terminated());
}

// ---- JSON --------------------------------------------------------------------------------------

TEST(GrammarMatcher, JsonSchemaAcceptsAValidAnswerTokenByToken) {
  REQUIRE_SMOLLM2(tok, compiler);
  GrammarMatcher m(compile_ok(*compiler, GrammarSpec::json_schema(kPersonSchema)));
  accept_text(*tok, m, kPersonAnswer);
  EXPECT_EQ(m.num_accepted(), static_cast<int32_t>(tok->encode(kPersonAnswer, false).size()));
  EXPECT_TRUE(m.is_completed());
  EXPECT_FALSE(m.is_terminated());
  // Complete: only the stop tokens remain (any whitespace after the object is allowed too).
  const std::vector<uint32_t> row = mask_of(m);
  for (int32_t id : allowed_ids(row, tok->vocab_size())) {
    const auto& stops = compiler->tokenizer().stop_token_ids();
    const bool is_stop = std::find(stops.begin(), stops.end(), id) != stops.end();
    const std::string bytes(compiler->tokenizer().token_bytes(id));
    EXPECT_TRUE(is_stop || std::all_of(bytes.begin(), bytes.end(), is_json_space))
        << "token " << id << " '" << bytes << "' after the end of the object";
  }
  const int32_t im_end = *tok->find_token("<|im_end|>");
  EXPECT_TRUE(token_allowed(row, im_end));
  EXPECT_TRUE(m.accept_token(im_end));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept_token(id_of(*tok, " ")));  // nothing after termination
  // After termination the mask allows the stop tokens only (xgrammar itself would throw).
  const std::vector<uint32_t> after = mask_of(m);
  const auto& stops = compiler->tokenizer().stop_token_ids();
  for (int32_t id : allowed_ids(after, tok->vocab_size())) {
    EXPECT_NE(std::find(stops.begin(), stops.end(), id), stops.end()) << id;
  }
  EXPECT_TRUE(token_allowed(after, im_end));
}

TEST(GrammarMatcher, JsonSchemaRejectsWhatTheSchemaForbids) {
  REQUIRE_SMOLLM2(tok, compiler);
  const CompiledGrammar g = compile_ok(*compiler, GrammarSpec::json_schema(kPersonSchema));
  {
    GrammarMatcher m(g);
    EXPECT_FALSE(m.accept_token(id_of(*tok, "a")));                // an object starts with '{'
    EXPECT_FALSE(m.accept_token(*tok->find_token("<|im_end|>")));  // not complete yet
    EXPECT_EQ(m.num_accepted(), 0);
    accept_text(*tok, m, "{\"name\": \"Ann\"");
    EXPECT_FALSE(m.accept_token(id_of(*tok, "}"))) << "age is required";
    accept_text(*tok, m, ", \"age\": ");  // a refused token left the state as it was
    EXPECT_FALSE(m.accept_token(id_of(*tok, "\""))) << "age is an integer, not a string";
    EXPECT_FALSE(m.accept_token(id_of(*tok, ".")));
    accept_text(*tok, m, "31}");
    EXPECT_TRUE(m.is_completed());
  }
  {
    GrammarMatcher m(g);
    accept_text(*tok, m, "{\"name\": \"Ann\", \"");
    EXPECT_FALSE(m.accept_token(id_of(*tok, "x"))) << "strict: no other properties";
  }
}

TEST(GrammarMatcher, JsonObjectMaskAtTheStartAllowsOnlyAnOpeningBrace) {
  REQUIRE_SMOLLM2(tok, compiler);
  GrammarMatcher m(compile_ok(*compiler, GrammarSpec::json_object()));
  const std::vector<uint32_t> row = mask_of(m);
  EXPECT_TRUE(token_allowed(row, id_of(*tok, "{")));
  for (const char* bad : {"a", "[", "\"", "1", "}"}) {
    EXPECT_FALSE(token_allowed(row, id_of(*tok, bad))) << bad;
  }
  EXPECT_FALSE(token_allowed(row, *tok->find_token("<|im_end|>")));
  EXPECT_FALSE(token_allowed(row, *tok->find_token("<|im_start|>")));
  // Every allowed token is whitespace, then '{' and what may follow it.
  const std::vector<int32_t> ids = allowed_ids(row, tok->vocab_size());
  EXPECT_GT(ids.size(), 1u);
  EXPECT_LT(ids.size(), 2000u);
  for (int32_t id : ids) {
    const std::string bytes(compiler->tokenizer().token_bytes(id));
    const auto first = std::find_if_not(bytes.begin(), bytes.end(), is_json_space);
    EXPECT_TRUE(first == bytes.end() || *first == '{') << "token " << id << " '" << bytes << "'";
  }
  accept_text(*tok, m, "{\"a\": [1, 2.5, null, {\"b\": true}]}");
  EXPECT_TRUE(m.is_completed());
}

TEST(GrammarMatcher, ControlTokensAreNeverAllowedInsideAString) {
  REQUIRE_SMOLLM2(tok, compiler);
  GrammarMatcher m(compile_ok(*compiler, GrammarSpec::json_schema(kPersonSchema)));
  accept_text(*tok, m, "{\"name\": \"");
  const std::vector<uint32_t> row = mask_of(m);
  EXPECT_GT(allowed_ids(row, tok->vocab_size()).size(), 40000u);  // almost any text
  EXPECT_FALSE(token_allowed(row, *tok->find_token("<|im_start|>")));
  EXPECT_FALSE(token_allowed(row, *tok->find_token("<|im_end|>")));
  EXPECT_FALSE(m.accept_token(*tok->find_token("<|im_start|>")));
  EXPECT_TRUE(m.accept_token(id_of(*tok, "<")));  // the characters themselves are fine
}

// ---- regex, choice, EBNF --------------------------------------------------------------------

TEST(GrammarMatcher, RegexOfThreeDigits) {
  REQUIRE_SMOLLM2(tok, compiler);
  GrammarMatcher m(compile_ok(*compiler, GrammarSpec::regex("[0-9]{3}")));
  const std::vector<int32_t> ids = allowed_ids(mask_of(m), tok->vocab_size());
  EXPECT_GE(ids.size(), 10u);
  for (int32_t id : ids) {
    const std::string bytes(compiler->tokenizer().token_bytes(id));
    EXPECT_TRUE(
        !bytes.empty() && bytes.size() <= 3 &&
        std::all_of(bytes.begin(), bytes.end(), [](char c) { return c >= '0' && c <= '9'; }))
        << "token " << id << " '" << bytes << "'";
  }
  EXPECT_FALSE(m.accept_token(id_of(*tok, "a")));
  accept_text(*tok, m, "123");
  EXPECT_TRUE(m.is_completed());
  EXPECT_FALSE(m.accept_token(id_of(*tok, "4")));
  EXPECT_TRUE(m.accept_token(*tok->find_token("<|endoftext|>")));
  EXPECT_TRUE(m.is_terminated());
}

TEST(GrammarMatcher, ChoiceListAllowsExactlyItsPrefixes) {
  REQUIRE_SMOLLM2(tok, compiler);
  const std::vector<std::string> choices = {"yes", "no", "maybe \"so\""};
  GrammarMatcher m(compile_ok(*compiler, GrammarSpec::choice(choices)));
  for (int32_t id : allowed_ids(mask_of(m), tok->vocab_size())) {
    const std::string bytes(compiler->tokenizer().token_bytes(id));
    EXPECT_TRUE(std::any_of(choices.begin(), choices.end(),
                            [&](const std::string& c) { return c.starts_with(bytes); }))
        << "token " << id << " '" << bytes << "'";
  }
  accept_text(*tok, m, "maybe \"so\"");
  EXPECT_TRUE(m.is_completed());
  m.reset();
  accept_text(*tok, m, "no");
  EXPECT_TRUE(m.is_completed());
  m.reset();
  const std::vector<int32_t> nope = tok->encode("nope", false);
  bool refused = false;
  for (int32_t id : nope) refused = refused || !m.accept_token(id);
  EXPECT_TRUE(refused);
}

TEST(GrammarMatcher, EbnfGrammar) {
  REQUIRE_SMOLLM2(tok, compiler);
  GrammarMatcher m(
      compile_ok(*compiler, GrammarSpec::ebnf(R"ebnf(root ::= "call(" arg ("," arg)* ")"
arg ::= [a-z]+)ebnf")));
  accept_text(*tok, m, "call(x,yz)");
  EXPECT_TRUE(m.is_completed());
}

// Tool calling (issue 19): the structural tags of model/tool_calling.hpp compile for both call
// syntaxes and accept exactly the calls they describe.
bool accepts_all(const Tokenizer& tok, GrammarMatcher& m, const std::string& text) {
  for (int32_t id : tok.encode(text, /*parse_special=*/false)) {
    if (!m.accept_token(id)) return false;
  }
  return true;
}

TEST(GrammarMatcher, ToolCallStructuralTags) {
  REQUIRE_SMOLLM2(tok, compiler);
  const std::string params = R"({"type":"object","properties":{"city":{"type":"string"}},)"
                             R"("required":["city"]})";
  const std::vector<ToolDefinition> tools = {{"f", params, "{}"}, {"g", "", "{}"}};
  auto grammar = [&](ToolCallFormat format, ToolChoiceMode mode, std::string name = {},
                     bool parallel = true) {
    ToolChoice choice{mode, std::move(name), parallel};
    const auto spec = tool_call_grammar(format, tools, choice, 4);
    EXPECT_TRUE(spec);
    return compile_ok(*compiler, *spec);
  };
  const std::string call_f =
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  const std::string call_g = "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>";
  const int32_t hello = tok->encode("Hello", false)[0];

  GrammarMatcher required(grammar(ToolCallFormat::kHermes, ToolChoiceMode::kRequired));
  EXPECT_FALSE(token_allowed(mask_of(required), hello));  // no text before the call
  accept_text(*tok, required, call_f + "\n" + call_g);
  EXPECT_TRUE(required.is_completed());

  GrammarMatcher one(grammar(ToolCallFormat::kHermes, ToolChoiceMode::kRequired, "", false));
  accept_text(*tok, one, call_g);
  EXPECT_TRUE(one.is_completed());
  EXPECT_FALSE(accepts_all(*tok, one, "\n" + call_g));  // parallel_tool_calls false: one call

  GrammarMatcher bad_args(grammar(ToolCallFormat::kHermes, ToolChoiceMode::kRequired));
  EXPECT_FALSE(accepts_all(*tok, bad_args,
                           "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"town\": 1}}"));

  GrammarMatcher named(grammar(ToolCallFormat::kHermes, ToolChoiceMode::kNamed, "g"));
  EXPECT_FALSE(accepts_all(*tok, named, call_f));
  named.reset();
  accept_text(*tok, named, call_g);
  EXPECT_TRUE(named.is_completed());

  GrammarMatcher lazy(grammar(ToolCallFormat::kHermes, ToolChoiceMode::kAuto));
  EXPECT_TRUE(token_allowed(mask_of(lazy), hello));  // free text until the trigger
  accept_text(*tok, lazy, "Hello, let me check. " + call_f + " Done.");
  EXPECT_TRUE(lazy.is_completed());
  lazy.reset();
  EXPECT_FALSE(accepts_all(*tok, lazy, "Ok <tool_call>\n{\"name\": \"h\""));  // unknown name

  GrammarMatcher llama(grammar(ToolCallFormat::kLlama3Json, ToolChoiceMode::kRequired));
  accept_text(*tok, llama,
              "{\"name\": \"f\", \"parameters\": {\"city\": \"Rome\"}}; "
              "{\"name\": \"g\", \"parameters\": {}}");
  EXPECT_TRUE(llama.is_completed());
  GrammarMatcher llama_auto(grammar(ToolCallFormat::kLlama3Json, ToolChoiceMode::kAuto));
  accept_text(*tok, llama_auto, "Sure: {\"name\": \"g\", \"parameters\": {}}");
  EXPECT_TRUE(llama_auto.is_completed());
}

// ---- rollback and reset --------------------------------------------------------------------

TEST(GrammarMatcher, RollbackRestoresEarlierStatesAndReplaysTheSame) {
  REQUIRE_SMOLLM2(tok, compiler);
  GrammarMatcher m(compile_ok(*compiler, GrammarSpec::json_schema(kPersonSchema)));
  const std::vector<int32_t> ids = tok->encode(kPersonAnswer, false);
  ASSERT_GE(ids.size(), 6u);
  std::vector<std::vector<uint32_t>> masks;  // the mask before each token
  for (int32_t id : ids) {
    masks.push_back(mask_of(m));
    ASSERT_TRUE(m.accept_token(id));
  }
  ASSERT_TRUE(m.accept_token(*tok->find_token("<|im_end|>")));
  ASSERT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.rollback(static_cast<int32_t>(ids.size()) + 2));  // more than accepted
  ASSERT_TRUE(m.rollback(1));                                      // the stop token
  EXPECT_FALSE(m.is_terminated());
  EXPECT_TRUE(m.is_completed());
  ASSERT_TRUE(m.rollback(4));  // as a verify step that rejects 4 draft tokens would
  EXPECT_FALSE(m.is_completed());
  const size_t resume = ids.size() - 4;
  EXPECT_EQ(mask_of(m), masks[resume]);
  for (size_t i = resume; i < ids.size(); ++i) ASSERT_TRUE(m.accept_token(ids[i]));
  EXPECT_TRUE(m.is_completed());

  // Preemption by recompute: reset, then the kept tokens again.
  m.reset();
  EXPECT_EQ(m.num_accepted(), 0);
  EXPECT_EQ(mask_of(m), masks[0]);
  for (size_t i = 0; i < 3; ++i) ASSERT_TRUE(m.accept_token(ids[i]));
  EXPECT_EQ(mask_of(m), masks[3]);
}

TEST(GrammarMatcher, BitmaskRowOfTheWrongSizeIsABug) {
  REQUIRE_SMOLLM2(tok, compiler);
  GrammarMatcher m(compile_ok(*compiler, GrammarSpec::regex("[0-9]{3}")));
  std::vector<uint32_t> row(10);
  EXPECT_THROW(m.fill_bitmask(row), std::invalid_argument);
}

// ---- errors as values --------------------------------------------------------------------------

TEST(GrammarCompiler, BadInputIsAnErrorValueWithTheReason) {
  REQUIRE_SMOLLM2(tok, compiler);
  struct Case {
    GrammarSpec spec;
    std::string expect_in_error;
  };
  const std::vector<Case> cases = {
      {GrammarSpec::json_schema(R"({"type":"object","properties":)"), "json_schema"},
      {GrammarSpec::json_schema(R"({"type":"no-such-type"})"), "json_schema"},
      {GrammarSpec::json_schema("[1, 2]"), "json_schema"},
      {GrammarSpec::regex("[0-9"), "regex"},
      {GrammarSpec::regex("(a|b"), "regex"},
      {GrammarSpec::ebnf("root ::= "), "ebnf"},
      {GrammarSpec::ebnf(R"(root ::= undefined_rule)"), "ebnf"},
      {GrammarSpec::choice({}), "empty"},
  };
  for (const Case& c : cases) {
    const CompileResult r = compiler->compile(c.spec);
    EXPECT_FALSE(r.ok()) << c.spec.cache_key();
    EXPECT_NE(r.error.find(c.expect_in_error), std::string::npos) << r.error;
    EXPECT_EQ(r.error.find("Check failed"), std::string::npos) << r.error;
    EXPECT_EQ(r.error.find(".cc:"), std::string::npos)
        << "no source paths for clients: " << r.error;
    EXPECT_GT(r.error.size(), c.expect_in_error.size() + 5) << "a reason: " << r.error;
  }
}

TEST(GrammarCompiler, SpecOverTheSizeBoundIsRefusedWithoutCompiling) {
  REQUIRE_SMOLLM2(tok, compiler);
  GrammarCompiler small(compiler->tokenizer(), GrammarCompilerConfig{.max_source_bytes = 16});
  const CompileResult r = small.compile(GrammarSpec::regex(std::string(17, 'a')));
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error.find("too large"), std::string::npos) << r.error;
  EXPECT_EQ(small.cache_stats().num_misses, 0u);
  EXPECT_TRUE(small.compile(GrammarSpec::regex(std::string(16, 'a'))).ok());
}

// ---- the cache
// -----------------------------------------------------------------------------------

TEST(GrammarCompiler, CacheReturnsTheSameGrammarAndEvictsTheLeastRecentlyUsed) {
  REQUIRE_SMOLLM2(tok, compiler);
  GrammarCompiler c(compiler->tokenizer(), GrammarCompilerConfig{.cache_capacity = 2});
  const GrammarSpec a = GrammarSpec::choice({"a"});
  const GrammarSpec b = GrammarSpec::choice({"b"});
  const GrammarSpec d = GrammarSpec::regex("b");  // same text as b's choice, another kind
  const CompiledGrammar ga = compile_ok(c, a);
  EXPECT_TRUE(compile_ok(c, a).same_object(ga));
  const CompiledGrammar gb = compile_ok(c, b);
  EXPECT_FALSE(gb.same_object(ga));
  EXPECT_TRUE(compile_ok(c, a).same_object(ga));  // a is now the most recently used
  const CompiledGrammar gd = compile_ok(c, d);    // evicts b
  EXPECT_FALSE(gd.same_object(gb));
  auto stats = c.cache_stats();
  EXPECT_EQ(stats.num_entries, 2u);
  EXPECT_EQ(stats.num_evictions, 1u);
  EXPECT_EQ(stats.num_hits, 2u);
  EXPECT_EQ(stats.num_misses, 3u);
  EXPECT_TRUE(compile_ok(c, a).same_object(ga));
  EXPECT_TRUE(compile_ok(c, d).same_object(gd));
  EXPECT_FALSE(compile_ok(c, b).same_object(gb)) << "b was evicted and compiled again";
  EXPECT_EQ(c.cache_stats().num_entries, 2u);
  // Errors are not cached.
  EXPECT_FALSE(c.compile(GrammarSpec::regex("[")).ok());
  EXPECT_FALSE(c.compile(GrammarSpec::regex("[")).ok());
  EXPECT_EQ(c.cache_stats().num_hits, 4u);
}

TEST(GrammarCompiler, CacheKeySeparatesKindsAndChoiceBoundaries) {
  EXPECT_NE(GrammarSpec::choice({"a|b"}).cache_key(), GrammarSpec::choice({"a", "b"}).cache_key());
  EXPECT_NE(GrammarSpec::choice({"ab", "c"}).cache_key(),
            GrammarSpec::choice({"a", "bc"}).cache_key());
  EXPECT_NE(GrammarSpec::regex("x").cache_key(), GrammarSpec::ebnf("x").cache_key());
  EXPECT_EQ(GrammarSpec::json_object().cache_key(), GrammarSpec::json_object().cache_key());
}

TEST(GrammarCompiler, ConcurrentCompilationsShareOneGrammarPerKey) {
  REQUIRE_SMOLLM2(tok, compiler);
  GrammarCompiler c(compiler->tokenizer(), GrammarCompilerConfig{.cache_capacity = 8});
  constexpr int kThreads = 4;
  std::vector<std::optional<CompiledGrammar>> same(kThreads), own(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      same[i] = c.compile(GrammarSpec::regex("[a-c]{2}")).grammar;
      own[i] = c.compile(GrammarSpec::choice({"t" + std::to_string(i)})).grammar;
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    ASSERT_TRUE(same[i] && own[i]);
    EXPECT_TRUE(same[i]->same_object(*same[0]));
    if (i > 0) {
      EXPECT_FALSE(own[i]->same_object(*own[0]));
    }
    GrammarMatcher m(*own[i]);
    accept_text(*tok, m, "t" + std::to_string(i));
    EXPECT_TRUE(m.is_completed());
  }
  EXPECT_EQ(c.cache_stats().num_entries, 1u + kThreads);
}

}  // namespace
}  // namespace troupe::model::grammar
