// Tokenizer construction from GGUF metadata, the special-token partition, and detokenization.
// The merge engines live in bpe_tokenizer.cpp and spm_tokenizer.cpp, pre-tokenization in
// pretokenizer.cpp.
#include "model/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>

#include "model/gguf.hpp"
#include "model/tokenizer_internal.hpp"
#include "model/unicode.hpp"

namespace troupe::model {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 '▁'

// Texts llama.cpp treats as end of generation whatever their declared type (src/llama-vocab.cpp
// of the reference build, llama-cpp-python 0.3.36's llama.cpp: Gemma 3's `</s>` is one).
constexpr std::array<std::string_view, 22> kEndOfGenerationTexts = {
    "<|eot_id|>",         "<|im_end|>", "<|end|>",   "<|return|>",      "<|call|>",
    "<|flush|>",          "<|calls|>",  "<end_of_turn>", "<|endoftext|>", "</s>",
    "<|eom_id|>",         "<EOT>",      "_<EOT>",    "[EOT]",           "[EOS]",
    "<|end_of_text|>",    "<end_of_utterance>", "<eos>", "<turn|>",     "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
};
// llama.cpp also stops on the fill-in-the-middle pad / repo / file-separator tokens (first found).
constexpr std::array<std::string_view, 4> kFimPadTexts = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                                          "<PAD>"};
constexpr std::array<std::string_view, 5> kFimRepoTexts = {"<|fim_repo|>", "<|repo_name|>",
                                                           "<fim-repo>", "<REPO>", "<reponame>"};
constexpr std::array<std::string_view, 1> kFimSepTexts = {"<|file_sep|>"};

bool is_special_type(TokenType t) {
  return t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUserDefined;
}

std::optional<int32_t> read_token_id(const GgufFile& file, std::string_view key,
                                     size_t num_tokens) {
  const GgufValue* v = file.find(key);
  if (v == nullptr) return std::nullopt;
  const std::optional<int64_t> id = v->as_int();
  if (!id || *id < 0 || static_cast<uint64_t>(*id) >= num_tokens) {
    throw GgufError("tokenizer metadata '" + std::string(key) +
                    "' is not a token id below the vocabulary size " + std::to_string(num_tokens));
  }
  return static_cast<int32_t>(*id);
}

std::optional<bool> read_bool(const GgufFile& file, std::string_view key) {
  const GgufValue* v = file.find(key);
  if (v == nullptr) return std::nullopt;
  if (auto b = v->as_bool()) return b;
  if (auto i = v->as_int()) return *i != 0;
  throw GgufError("tokenizer metadata '" + std::string(key) + "' is not a bool");
}

// Splits `text` at special-token texts (longest first), as llama.cpp's tokenizer_st_partition.
struct Fragment {
  int32_t token_id;  // -1 for raw text
  size_t offset;
  size_t length;
};

bool overlaps_any(std::span<const TextSpan> spans, size_t begin, size_t end) {
  for (const TextSpan& s : spans) {
    if (begin < s.end && s.begin < end) return true;
  }
  return false;
}

std::vector<Fragment> partition_special(const Tokenizer::Impl& t, std::string_view text,
                                        bool parse_special, std::span<const TextSpan> plain_spans) {
  std::vector<Fragment> fragments{{-1, 0, text.size()}};
  if (text.empty()) return {};
  std::vector<Fragment> next;
  for (const int32_t id : t.special_ids) {
    const TokenType type = t.effective_types[id];
    if (!parse_special && (type == TokenType::kControl || type == TokenType::kUnknown)) continue;
    const std::string& needle = t.vocab.tokens[id];
    if (needle.empty()) continue;
    bool changed = false;
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token_id >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view hay = text.substr(f.offset, f.length);
      size_t pos = 0;
      size_t search = 0;
      while (true) {
        const size_t match = hay.find(needle, search);
        if (match == std::string_view::npos) break;
        if (overlaps_any(plain_spans, f.offset + match, f.offset + match + needle.size())) {
          search = match + 1;  // inside untrusted content: stays text
          continue;
        }
        if (match > pos) next.push_back({-1, f.offset + pos, match - pos});
        next.push_back({id, 0, 0});
        pos = match + needle.size();
        search = pos;
        changed = true;
      }
      if (pos < hay.size()) next.push_back({-1, f.offset + pos, hay.size() - pos});
    }
    if (changed) fragments.swap(next);
  }
  return fragments;
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  TokenizerVocab v;
  const std::string_view model = file.require_string("tokenizer.ggml.model");
  if (model == "gpt2") {
    v.kind = TokenizerKind::kBytePairBpe;
  } else if (model == "llama") {
    v.kind = TokenizerKind::kSentencePiece;
  } else {
    throw GgufError("unsupported tokenizer.ggml.model '" + std::string(model) +
                    "' (troupe supports 'gpt2' byte-level BPE and 'llama' SentencePiece)");
  }
  if (auto pre = file.get_string("tokenizer.ggml.pre")) v.pre = std::string(*pre);

  const GgufValue* tokens = file.find("tokenizer.ggml.tokens");
  if (tokens == nullptr) throw GgufError("missing tokenizer.ggml.tokens");
  auto token_texts = tokens->as_string_array();
  if (!token_texts || token_texts->empty())
    throw GgufError("tokenizer.ggml.tokens is not a non-empty string array");
  v.tokens.assign(token_texts->begin(), token_texts->end());
  const size_t n = v.tokens.size();
  if (n >= static_cast<size_t>(INT32_MAX))
    throw GgufError("tokenizer.ggml.tokens has too many entries");

  if (const GgufValue* types = file.find("tokenizer.ggml.token_type")) {
    auto values = types->as_int_array();
    if (!values || values->size() != n) {
      throw GgufError("tokenizer.ggml.token_type is not an integer array of " + std::to_string(n) +
                      " entries");
    }
    v.token_types.reserve(n);
    for (const int64_t t : *values) {
      v.token_types.push_back((t >= 0 && t <= 6) ? static_cast<TokenType>(t)
                                                 : TokenType::kUndefined);
    }
  }
  if (const GgufValue* scores = file.find("tokenizer.ggml.scores")) {
    auto values = scores->as_float_array();
    if (!values || values->size() != n) {
      throw GgufError("tokenizer.ggml.scores is not a float array of " + std::to_string(n) +
                      " entries");
    }
    v.scores = std::move(*values);
  }
  if (v.kind == TokenizerKind::kBytePairBpe) {
    const GgufValue* merges = file.find("tokenizer.ggml.merges");
    if (merges == nullptr)
      throw GgufError("missing tokenizer.ggml.merges (required by a gpt2 tokenizer)");
    auto values = merges->as_string_array();
    if (!values) throw GgufError("tokenizer.ggml.merges is not a string array");
    v.merges.assign(values->begin(), values->end());
  }
  v.bos_id = read_token_id(file, "tokenizer.ggml.bos_token_id", n);
  v.eos_id = read_token_id(file, "tokenizer.ggml.eos_token_id", n);
  v.unk_id = read_token_id(file, "tokenizer.ggml.unknown_token_id", n);
  v.pad_id = read_token_id(file, "tokenizer.ggml.padding_token_id", n);
  v.eot_id = read_token_id(file, "tokenizer.ggml.eot_token_id", n);
  v.eom_id = read_token_id(file, "tokenizer.ggml.eom_token_id", n);
  v.add_bos = read_bool(file, "tokenizer.ggml.add_bos_token");
  v.add_eos = read_bool(file, "tokenizer.ggml.add_eos_token");
  v.add_space_prefix = read_bool(file, "tokenizer.ggml.add_space_prefix");
  try {
    return from_vocab(std::move(v));
  } catch (const GgufError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw GgufError(e.what());
  }
}

namespace {

// Sizes agree and every named id is inside the vocabulary. Throws std::runtime_error.
void check_vocab(const TokenizerVocab& v) {
  const size_t n = v.tokens.size();
  if (n == 0) throw std::runtime_error("tokenizer vocabulary is empty");
  if (!v.token_types.empty() && v.token_types.size() != n) {
    throw std::runtime_error("tokenizer token_types size differs from the vocabulary size");
  }
  if (!v.scores.empty() && v.scores.size() != n) {
    throw std::runtime_error("tokenizer scores size differs from the vocabulary size");
  }
  auto check_id = [n](const std::optional<int32_t>& id, const char* what) {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= n)) {
      throw std::runtime_error(std::string("tokenizer ") + what + " id is out of range");
    }
  };
  check_id(v.bos_id, "bos");
  check_id(v.eos_id, "eos");
  check_id(v.unk_id, "unk");
  check_id(v.eot_id, "eot");
  check_id(v.eom_id, "eom");
  check_id(v.pad_id, "pad");
}

// The special ids and flags the file leaves out, as llama.cpp defaults them per tokenizer kind.
void resolve_defaults(Tokenizer::Impl& t) {
  const size_t n = t.vocab.tokens.size();
  if (t.vocab.kind == TokenizerKind::kSentencePiece) {
    t.bos_id = t.vocab.bos_id.value_or(n > 1 ? 1 : -1);
    t.eos_id = t.vocab.eos_id.value_or(n > 2 ? 2 : -1);
    t.unk_id = t.vocab.unk_id.value_or(0);
    t.add_bos = t.vocab.add_bos.value_or(true);
    t.add_space_prefix = t.vocab.add_space_prefix.value_or(true);
  } else {
    t.pre_tokenizer = PreTokenizer(PreTokenizer::kind_from_name(t.vocab.pre));
    const bool llama3 = t.pre_tokenizer.kind() == PreTokenizerKind::kLlama3;
    t.ignore_merges = llama3;
    t.bos_id = t.vocab.bos_id.value_or(-1);
    t.eos_id = t.vocab.eos_id.value_or(-1);
    t.unk_id = t.vocab.unk_id.value_or(-1);
    t.add_bos = t.vocab.add_bos.value_or(llama3);
    t.add_space_prefix = false;
  }
  t.add_eos = t.vocab.add_eos.value_or(false);
}

// The end-of-generation set; tokens found by text are forced to CONTROL as llama.cpp does.
void collect_end_of_generation(Tokenizer::Impl& t) {
  std::vector<int32_t> eog;
  for (const auto& id : {t.vocab.eos_id, t.vocab.eot_id, t.vocab.eom_id}) {
    if (id) eog.push_back(*id);
  }
  if (!t.vocab.eos_id && t.eos_id >= 0) eog.push_back(t.eos_id);
  for (const std::string_view text : kEndOfGenerationTexts) {
    const int32_t id = t.find(text);
    if (id < 0) continue;
    eog.push_back(id);
    if (t.effective_types[id] != TokenType::kControl) t.effective_types[id] = TokenType::kControl;
  }
  auto first_found = [&](auto texts) {
    for (const std::string_view text : texts) {
      if (const int32_t id = t.find(text); id >= 0) {
        eog.push_back(id);
        return;
      }
    }
  };
  first_found(kFimPadTexts);
  first_found(kFimRepoTexts);
  first_found(kFimSepTexts);
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  t.eog_ids = std::move(eog);
  t.is_eog.assign(t.vocab.tokens.size(), false);
  for (const int32_t id : t.eog_ids) t.is_eog[id] = true;
}

}  // namespace

Tokenizer Tokenizer::from_vocab(TokenizerVocab vocab) {
  check_vocab(vocab);
  auto impl = std::make_shared<Impl>();
  Impl& t = *impl;
  t.vocab = std::move(vocab);
  const size_t n = t.vocab.tokens.size();
  t.text_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) t.text_to_id[t.vocab.tokens[i]] = static_cast<int32_t>(i);
  t.effective_types = t.vocab.token_types;
  if (t.effective_types.empty()) t.effective_types.assign(n, TokenType::kNormal);
  resolve_defaults(t);
  collect_end_of_generation(t);

  for (size_t i = 0; i < n; ++i) {
    if (is_special_type(t.effective_types[i])) t.special_ids.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(t.special_ids.begin(), t.special_ids.end(), [&](int32_t a, int32_t b) {
    return t.vocab.tokens[a].size() > t.vocab.tokens[b].size();
  });

  if (t.vocab.kind == TokenizerKind::kSentencePiece) {
    spm_build_tables(t);
  } else {
    bpe_build_tables(t);
  }
  const Tokenizer built(impl);
  for (size_t i = 0; i < n; ++i) {
    t.max_token_bytes = std::max(t.max_token_bytes, built.token_piece(static_cast<int32_t>(i), true).size());
  }
  return built;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special,
                                       size_t max_tokens) const {
  return encode_fragments(text, parse_special, {}, max_tokens);
}

std::vector<int32_t> Tokenizer::encode_with_plain_spans(std::string_view text,
                                                        std::span<const TextSpan> plain_spans,
                                                        size_t max_tokens) const {
  return encode_fragments(text, true, plain_spans, max_tokens);
}

size_t Tokenizer::max_token_bytes() const { return impl_->max_token_bytes; }

// NOTE: the early stop (max_tokens) is checked between pre-tokens (BPE) and fragments
// (SentencePiece, whose merges need a whole fragment): a bound on work, not an exact cut.
std::vector<int32_t> Tokenizer::encode_fragments(std::string_view text, bool parse_special,
                                                 std::span<const TextSpan> plain_spans,
                                                 size_t max_tokens) const {
  const Impl& t = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  const std::vector<Fragment> fragments = partition_special(t, text, parse_special, plain_spans);
  if (t.vocab.kind == TokenizerKind::kBytePairBpe) {
    for (const Fragment& f : fragments) {
      if (f.token_id >= 0) {
        out.push_back(f.token_id);
        continue;
      }
      for (const std::string& piece : t.pre_tokenizer.split(text.substr(f.offset, f.length))) {
        bpe_encode_piece(t, piece, out);
        if (out.size() > max_tokens) return out;
      }
    }
    return out;
  }
  bool previous_special = true;  // the text start counts as "after a special token"
  std::string escaped;
  for (const Fragment& f : fragments) {
    if (f.token_id >= 0) {
      out.push_back(f.token_id);
      previous_special = true;
      continue;
    }
    escaped.clear();
    if (t.add_space_prefix && previous_special) escaped.append(kSpaceMarker);
    for (const char c : text.substr(f.offset, f.length)) {
      if (c == ' ') {
        escaped.append(kSpaceMarker);
      } else {
        escaped.push_back(c);
      }
    }
    spm_encode_fragment(t, escaped, out);
    previous_special = false;
    if (out.size() > max_tokens) return out;
  }
  return out;
}

std::string Tokenizer::token_piece(int32_t id, bool render_special) const {
  const Impl& t = *impl_;
  if (id < 0 || static_cast<size_t>(id) >= t.vocab.tokens.size()) return {};
  const std::string& text = t.vocab.tokens[id];
  switch (t.effective_types[id]) {
    case TokenType::kControl:
    case TokenType::kUnknown: return render_special ? text : std::string();
    case TokenType::kUserDefined: return text;
    case TokenType::kNormal: break;
    case TokenType::kByte:
      if (t.vocab.kind == TokenizerKind::kSentencePiece && text.size() >= 6) {
        return std::string(1, static_cast<char>(std::strtol(text.c_str() + 3, nullptr, 16)));
      }
      return {};
    case TokenType::kUndefined:
    case TokenType::kUnused: return {};
  }
  std::string out;
  if (t.vocab.kind == TokenizerKind::kSentencePiece) {
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      if (text.compare(i, kSpaceMarker.size(), kSpaceMarker) == 0) {
        out.push_back(' ');
        i += kSpaceMarker.size();
      } else {
        out.push_back(text[i++]);
      }
    }
    return out;
  }
  // Byte-level BPE: map each code point back to its byte. A code point outside the map (not
  // produced by a byte-level converter) is kept as its own UTF-8.
  for (const char32_t cp : unicode::decode_lenient(text)) {
    if (auto b = unicode::codepoint_to_byte(cp)) {
      out.push_back(static_cast<char>(*b));
    } else {
      unicode::append_utf8(out, cp);
    }
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  for (const int32_t id : ids) out += token_piece(id, render_special);
  return out;
}

std::string_view Tokenizer::token_text(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->vocab.tokens.size()) return {};
  return impl_->vocab.tokens[id];
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const int32_t id = impl_->find(text);
  if (id < 0) return std::nullopt;
  return id;
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->vocab.tokens.size()) return TokenType::kUndefined;
  return impl_->effective_types[id];
}

bool Tokenizer::is_control(int32_t id) const {
  const TokenType t = token_type(id);
  return t == TokenType::kControl || t == TokenType::kUnknown;
}

TokenizerKind Tokenizer::kind() const {
  return impl_->vocab.kind;
}
PreTokenizerKind Tokenizer::pre_tokenizer() const {
  return impl_->pre_tokenizer.kind();
}
size_t Tokenizer::vocab_size() const {
  return impl_->vocab.tokens.size();
}
int32_t Tokenizer::bos_id() const {
  return impl_->bos_id;
}
int32_t Tokenizer::eos_id() const {
  return impl_->eos_id;
}
bool Tokenizer::add_bos() const {
  return impl_->add_bos;
}
bool Tokenizer::add_eos() const {
  return impl_->add_eos;
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->is_eog.size() && impl_->is_eog[id];
}

const std::vector<int32_t>& Tokenizer::end_of_generation_ids() const {
  return impl_->eog_ids;
}

}  // namespace troupe::model
