// GrammarCompiler: the LRU cache around xgrammar's compiler (see grammar_compiler.hpp).
#include "model/grammar/grammar_compiler.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <vector>

#include "model/grammar/xgrammar_impl.hpp"

namespace troupe::model::grammar {
namespace {

// A string literal of xgrammar's EBNF for arbitrary bytes: quotes and backslashes escaped,
// control bytes as \uXXXX (fixed width: \x would swallow following hex digits). Other bytes go
// through as they are; invalid UTF-8 makes xgrammar's parser report an error.
std::string ebnf_string_literal(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out.push_back(ch);
    }
  }
  out.push_back('"');
  return out;
}

std::string choice_grammar(const std::vector<std::string>& choices) {
  std::string ebnf = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) ebnf += " | ";
    ebnf += ebnf_string_literal(choices[i]);
  }
  return ebnf;
}

}  // namespace

struct GrammarCompiler::Xgrammar {
  xgrammar::GrammarCompiler compiler;
};

GrammarKind CompiledGrammar::kind() const {
  return impl_->kind;
}
size_t CompiledGrammar::memory_bytes() const {
  return impl_->compiled.MemorySizeBytes();
}
const TokenizerInfo& CompiledGrammar::tokenizer() const {
  return impl_->tokenizer;
}

GrammarCompiler::GrammarCompiler(TokenizerInfo tokenizer, GrammarCompilerConfig config)
    : tokenizer_(std::move(tokenizer)),
      config_(config),
      xgrammar_(std::make_unique<Xgrammar>(Xgrammar{xgrammar::GrammarCompiler(
          tokenizer_.impl().info, std::max(1, config_.threads_per_compile),
          /*cache_enabled=*/false)})) {}

GrammarCompiler::~GrammarCompiler() = default;

CompileResult GrammarCompiler::compile(const GrammarSpec& spec) {
  if (spec.source_bytes() > config_.max_source_bytes) {
    return {std::nullopt, std::string(grammar_kind_name(spec.kind)) +
                              " is too large: " + std::to_string(spec.source_bytes()) +
                              " bytes, the limit is " + std::to_string(config_.max_source_bytes)};
  }
  const std::string key = spec.cache_key();
  if (auto cached = lookup(key)) return {std::move(cached), {}};
  CompileResult result = compile_uncached(spec);
  if (result.ok()) result.grammar = insert(key, std::move(*result.grammar));
  return result;
}

CompileResult GrammarCompiler::compile_uncached(const GrammarSpec& spec) {
  auto impl = std::make_shared<CompiledGrammar::Impl>(
      CompiledGrammar::Impl{xgrammar::CompiledGrammar(xgrammar::NullObj{}), spec.kind, tokenizer_});
  xgrammar::GrammarCompiler& xgr = xgrammar_->compiler;
  try {
    switch (spec.kind) {
      case GrammarKind::kJsonObject:
        // As vLLM: OpenAI's json_object mode means an object, not any JSON value.
        impl->compiled =
            xgr.CompileJSONSchema(R"({"type":"object"})", config_.json_any_whitespace, std::nullopt,
                                  std::nullopt, /*strict_mode=*/true, config_.json_max_whitespace);
        break;
      case GrammarKind::kJsonSchema:
        impl->compiled =
            xgr.CompileJSONSchema(spec.source, config_.json_any_whitespace, std::nullopt,
                                  std::nullopt, /*strict_mode=*/true, config_.json_max_whitespace);
        break;
      case GrammarKind::kRegex: impl->compiled = xgr.CompileRegex(spec.source); break;
      case GrammarKind::kChoice:
        if (spec.choices.empty()) return {std::nullopt, "choice: the list of choices is empty"};
        impl->compiled = xgr.CompileGrammar(choice_grammar(spec.choices), "root");
        break;
      case GrammarKind::kEbnf: impl->compiled = xgr.CompileGrammar(spec.source, "root"); break;
      case GrammarKind::kStructuralTag: impl->compiled = xgr.CompileStructuralTag(spec.source); break;
    }
  } catch (const std::exception& e) {
    return {std::nullopt, "invalid " + std::string(grammar_kind_name(spec.kind)) + ": " + e.what()};
  }
  return {CompiledGrammar(std::move(impl)), {}};
}

std::optional<CompiledGrammar> GrammarCompiler::lookup(const std::string& key) {
  std::lock_guard lock(mutex_);
  const auto it = index_.find(key);
  if (it == index_.end()) {
    ++stats_.num_misses;
    return std::nullopt;
  }
  ++stats_.num_hits;
  lru_.splice(lru_.begin(), lru_, it->second);  // now the most recently used
  return it->second->second;
}

CompiledGrammar GrammarCompiler::insert(const std::string& key, CompiledGrammar grammar) {
  if (config_.cache_capacity == 0) return grammar;
  std::lock_guard lock(mutex_);
  if (const auto it = index_.find(key); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);  // another thread compiled it first
    return it->second->second;
  }
  lru_.emplace_front(key, std::move(grammar));
  index_.emplace(key, lru_.begin());
  while (lru_.size() > config_.cache_capacity) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
    ++stats_.num_evictions;
  }
  return lru_.front().second;
}

GrammarCompiler::CacheStats GrammarCompiler::cache_stats() const {
  std::lock_guard lock(mutex_);
  CacheStats s = stats_;
  s.num_entries = lru_.size();
  return s;
}

}  // namespace troupe::model::grammar
