// Structured output costs on the real SmolLM2 vocabulary (49,152 tokens, 1,536 mask words):
//
//   BM_BuildTokenizerInfo          start-up: the vocabulary as bytes, xgrammar's sorted trie
//   BM_CompileJsonSchema           one JSON schema compiled (cache off), what a new request
//                                  with an unseen schema costs a worker thread
//   BM_CompileJsonSchemaLarge      a nested order schema (arrays, enums, bounds, pattern, email)
//   BM_CompileJsonObject           the same for {"type":"json_object"}
//   BM_FillMaskAlongAnswer         per token of {"name": "Ann", "age": 31}: fill the mask, then
//                                  accept the token -- the per-step cost of one constrained row
//   BM_FillMaskAt/<state>          one fill at a given point: 0 = start (structural, 3 tokens
//                                  allowed), 1 = inside a string (almost all allowed),
//                                  2 = inside the integer
//   BM_ApplyMask/<state>           gpu/cpu apply_token_bitmask on a 49,152-logit row, same states
//
// Needs models/SmolLM2-135M-Instruct.Q4_1.gguf (or TROUPE_TEST_MODEL). Single-threaded.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "gpu/cpu/token_mask.hpp"
#include "model/gguf.hpp"
#include "model/grammar/grammar_compiler.hpp"
#include "model/grammar/grammar_matcher.hpp"
#include "model/grammar/tokenizer_info.hpp"
#include "model/tokenizer.hpp"

namespace troupe::model::grammar {
namespace {

constexpr const char* kPersonSchema =
    R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},)"
    R"("required":["name","age"]})";
constexpr const char* kPersonAnswer = R"({"name": "Ann", "age": 31})";
// A larger schema of the kind the issue's suite sends: nesting, arrays, enums, bounds, formats.
constexpr const char* kOrderSchema = R"({"type":"object","properties":{
  "id":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},
  "customer":{"type":"object","properties":{"name":{"type":"string","minLength":1},
    "email":{"type":"string","format":"email"},"tier":{"enum":["free","pro","enterprise"]}},
    "required":["name","email"]},
  "items":{"type":"array","minItems":1,"items":{"type":"object","properties":{
    "sku":{"type":"string"},"quantity":{"type":"integer","minimum":1,"maximum":100},
    "price":{"type":"number","minimum":0}},"required":["sku","quantity","price"]}},
  "status":{"enum":["pending","shipped","delivered"]},"gift":{"type":"boolean"},
  "notes":{"type":["string","null"]}},
  "required":["id","customer","items","status"]})";
const char* const kStatePrefixes[] = {"", R"({"name": ")", R"({"name": "Ann", "age": 3)"};

const Tokenizer& tokenizer() {
  static const Tokenizer tok = [] {
    std::filesystem::path path =
        std::filesystem::path(TROUPE_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
    if (const char* env = std::getenv("TROUPE_TEST_MODEL"); env != nullptr && *env != '\0')
      path = env;
    if (!std::filesystem::exists(path)) throw std::runtime_error("no model at " + path.string());
    return Tokenizer::from_gguf(GgufFile::open(path));
  }();
  return tok;
}

const TokenizerInfo& info() {
  static const TokenizerInfo i = TokenizerInfo::from_tokenizer(tokenizer());
  return i;
}

CompiledGrammar schema_grammar() {
  static GrammarCompiler compiler(info());
  CompileResult r = compiler.compile(GrammarSpec::json_schema(kPersonSchema));
  if (!r.ok()) throw std::runtime_error(r.error);
  return *r.grammar;
}

void BM_BuildTokenizerInfo(benchmark::State& state) {
  const Tokenizer& tok = tokenizer();
  for (auto _ : state) benchmark::DoNotOptimize(TokenizerInfo::from_tokenizer(tok));
}
BENCHMARK(BM_BuildTokenizerInfo)->Unit(benchmark::kMillisecond);

void compile_each_time(benchmark::State& state, const GrammarSpec& spec) {
  GrammarCompiler compiler(info(), GrammarCompilerConfig{.cache_capacity = 0});
  for (auto _ : state) {
    CompileResult r = compiler.compile(spec);
    if (!r.ok()) state.SkipWithError(r.error.c_str());
    benchmark::DoNotOptimize(r);
  }
}
void BM_CompileJsonSchema(benchmark::State& state) {
  compile_each_time(state, GrammarSpec::json_schema(kPersonSchema));
}
BENCHMARK(BM_CompileJsonSchema)->Unit(benchmark::kMillisecond);
void BM_CompileJsonSchemaLarge(benchmark::State& state) {
  compile_each_time(state, GrammarSpec::json_schema(kOrderSchema));
}
BENCHMARK(BM_CompileJsonSchemaLarge)->Unit(benchmark::kMillisecond);
void BM_CompileJsonObject(benchmark::State& state) {
  compile_each_time(state, GrammarSpec::json_object());
}
BENCHMARK(BM_CompileJsonObject)->Unit(benchmark::kMillisecond);

void BM_FillMaskAlongAnswer(benchmark::State& state) {
  const std::vector<int32_t> ids = tokenizer().encode(kPersonAnswer, false);
  GrammarMatcher m(schema_grammar());
  std::vector<uint32_t> row(info().bitmask_num_words());
  for (auto _ : state) {
    m.reset();
    for (int32_t id : ids) {
      m.fill_bitmask(row);
      benchmark::DoNotOptimize(row.data());
      if (!m.accept_token(id)) state.SkipWithError("token refused");
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(ids.size()));
  state.counters["tokens"] = static_cast<double>(ids.size());
}
BENCHMARK(BM_FillMaskAlongAnswer)->Unit(benchmark::kMicrosecond);

GrammarMatcher matcher_at(int64_t state_index) {
  GrammarMatcher m(schema_grammar());
  for (int32_t id : tokenizer().encode(kStatePrefixes[state_index], false)) {
    if (!m.accept_token(id)) throw std::runtime_error("prefix refused");
  }
  return m;
}

void BM_FillMaskAt(benchmark::State& state) {
  GrammarMatcher m = matcher_at(state.range(0));
  std::vector<uint32_t> row(info().bitmask_num_words());
  for (auto _ : state) {
    m.fill_bitmask(row);
    benchmark::DoNotOptimize(row.data());
  }
  int64_t allowed = 0;
  for (uint32_t w : row) allowed += __builtin_popcount(w);
  state.counters["allowed"] = static_cast<double>(allowed);
}
BENCHMARK(BM_FillMaskAt)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

void BM_ApplyMask(benchmark::State& state) {
  GrammarMatcher m = matcher_at(state.range(0));
  std::vector<uint32_t> row(info().bitmask_num_words());
  m.fill_bitmask(row);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> logits(info().vocab_size());
  for (float& x : logits) x = dist(rng);
  // Idempotent: the same row again does the same work (masked entries are rewritten).
  for (auto _ : state) {
    benchmark::DoNotOptimize(gpu::cpu::apply_token_bitmask(logits, row));
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_ApplyMask)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace troupe::model::grammar

BENCHMARK_MAIN();
