// Compiles GrammarSpecs into CompiledGrammars for one vocabulary, behind a bounded LRU cache
// keyed by the spec's kind and source text (GrammarSpec::cache_key).
//
//   compile(spec) ──► lookup(key) ──hit──► the cached CompiledGrammar (same object)
//                        │miss
//                        ▼  (no lock held: compilations on several threads run in parallel)
//                  xgrammar compile ──error──► CompileResult{error}   (never cached)
//                        ▼ ok
//                  insert(key) ──► evict the least recently used entry beyond the capacity
//
// Compilation is the slow part (6-42 ms for the schemas of bench/grammar_bench.cpp on a 49k
// vocabulary: xgrammar precomputes token masks per grammar state), so it runs on worker threads,
// never on the scheduler's. Errors (a bad schema, regex or grammar, a spec over the size bound)
// come back as values with xgrammar's reason; no exception leaves compile().
// NOTE: two threads missing on the same key at once both compile; the first to insert wins and
// the second returns the cached object, so callers always share one CompiledGrammar per key.
// NOTE: xgrammar's own compiler cache is off: ours is the only one, and it is what is bounded.
//
// Thread-safety: compile() and cache_stats() may be called from any thread concurrently.
// A CompiledGrammar is immutable and shared by every matcher built from it, on any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "model/grammar/grammar_spec.hpp"
#include "model/grammar/tokenizer_info.hpp"

namespace troupe::model::grammar {

struct GrammarCompilerConfig {
  size_t cache_capacity = 64;           // compiled grammars kept; 0 disables the cache
  size_t max_source_bytes = 64 * 1024;  // larger specs are refused without compiling
  int32_t threads_per_compile = 1;      // xgrammar's pool per compilation (1: caller's thread)
  bool json_any_whitespace = true;      // any whitespace between JSON tokens (xgrammar default)
  // Caps a run of JSON whitespace when json_any_whitespace (small models can emit newlines
  // forever inside an object); unset: unbounded, as xgrammar's default.
  std::optional<int32_t> json_max_whitespace;
};

class CompiledGrammar {
 public:
  GrammarKind kind() const;
  size_t memory_bytes() const;
  const TokenizerInfo& tokenizer() const;
  // Identity, not structural equality: the cache hands out the same object for the same key.
  bool same_object(const CompiledGrammar& other) const { return impl_ == other.impl_; }

  struct Impl;
  explicit CompiledGrammar(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<const Impl> impl_;
};

// A compiled grammar, or why there is none (ready for a 400 naming the field).
struct CompileResult {
  std::optional<CompiledGrammar> grammar;
  std::string error;
  bool ok() const { return grammar.has_value(); }
};

class GrammarCompiler {
 public:
  explicit GrammarCompiler(TokenizerInfo tokenizer, GrammarCompilerConfig config = {});
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  CompileResult compile(const GrammarSpec& spec);

  struct CacheStats {
    size_t num_entries = 0;
    uint64_t num_hits = 0;
    uint64_t num_misses = 0;
    uint64_t num_evictions = 0;
  };
  CacheStats cache_stats() const;
  const TokenizerInfo& tokenizer() const { return tokenizer_; }
  const GrammarCompilerConfig& config() const { return config_; }

 private:
  std::optional<CompiledGrammar> lookup(const std::string& key);
  CompiledGrammar insert(const std::string& key, CompiledGrammar grammar);
  CompileResult compile_uncached(const GrammarSpec& spec);

  struct Xgrammar;  // xgrammar::GrammarCompiler
  TokenizerInfo tokenizer_;
  GrammarCompilerConfig config_;
  std::unique_ptr<Xgrammar> xgrammar_;

  mutable std::mutex mutex_;  // guards everything below
  // Most recently used first; index_ points into it.
  std::list<std::pair<std::string, CompiledGrammar>> lru_;
  std::unordered_map<std::string, std::list<std::pair<std::string, CompiledGrammar>>::iterator>
      index_;
  CacheStats stats_;
};

}  // namespace troupe::model::grammar
