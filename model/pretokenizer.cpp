// Hand-written regex matchers for the BPE pre-tokenizers (see pretokenizer.hpp).
//
// Every pass takes the piece lengths left by the previous pass and splits each piece further; a
// matcher never looks across a piece boundary (llama.cpp's _get_flags returns "no flags" outside
// the current piece, and the \s+(?!\S) rule treats the piece end as "not \S").
#include "model/pretokenizer.hpp"

#include <stdexcept>
#include <string>

#include "model/unicode.hpp"

namespace troupe::model {
namespace {

using unicode::CodepointFlags;
using unicode::flags_of;
using Offsets = std::vector<size_t>;

constexpr uint32_t kOutOfRange = 0xFFFFFFFF;

// Code points of one piece with the out-of-piece conventions of llama.cpp's custom splitters.
class PieceView {
 public:
  PieceView(const std::vector<char32_t>& cpts, size_t begin, size_t end)
      : cpts_(cpts), begin_(begin), end_(end) {}
  uint32_t cpt(size_t pos) const {
    return (pos >= begin_ && pos < end_) ? cpts_[pos] : kOutOfRange;
  }
  CodepointFlags flags(size_t pos) const {
    return (pos >= begin_ && pos < end_) ? flags_of(cpts_[pos]) : CodepointFlags{};
  }
  size_t begin() const { return begin_; }
  size_t end() const { return end_; }

 private:
  const std::vector<char32_t>& cpts_;
  size_t begin_;
  size_t end_;
};

// Collects piece lengths; zero-length pieces are dropped.
class PieceSink {
 public:
  PieceSink(Offsets& out, size_t start) : out_(out), prev_end_(start) {}
  size_t add(size_t end) {
    const size_t len = end - prev_end_;
    if (len > 0) out_.push_back(len);
    prev_end_ = end;
    return len;
  }

 private:
  Offsets& out_;
  size_t prev_end_;
};

bool is_ascii_lower(uint32_t c, char lower) {
  return c == uint32_t(lower) || c == uint32_t(lower - 32);
}

// 's|'t|'re|'ve|'m|'ll|'d — case-insensitive for Llama 3 / Qwen 2. Returns the match length.
size_t match_contraction(const PieceView& v, size_t pos, bool ignore_case) {
  if (v.cpt(pos) != '\'' || pos + 1 >= v.end()) return 0;
  const uint32_t c1 = v.cpt(pos + 1);
  auto is = [&](uint32_t c, char lower) {
    return ignore_case ? is_ascii_lower(c, lower) : c == uint32_t(lower);
  };
  if (is(c1, 's') || is(c1, 't') || is(c1, 'm') || is(c1, 'd')) return 2;
  if (pos + 2 < v.end()) {
    const uint32_t c2 = v.cpt(pos + 2);
    if ((is(c1, 'r') && is(c2, 'e')) || (is(c1, 'v') && is(c2, 'e')) ||
        (is(c1, 'l') && is(c2, 'l')))
      return 3;
  }
  return 0;
}

bool is_other(const CodepointFlags& f) {  // [^\s\p{L}\p{N}], and a real code point
  return !(f.is_whitespace() || f.is_letter() || f.is_number()) && f.is_defined();
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void split_gpt2(const PieceView& v, Offsets& out) {
  PieceSink sink(out, v.begin());
  for (size_t pos = v.begin(); pos < v.end();) {
    const uint32_t cpt = v.cpt(pos);
    if (const size_t n = match_contraction(v, pos, false)) {
      pos += sink.add(pos + n);
      continue;
    }
    CodepointFlags f2 = (cpt == ' ') ? v.flags(pos + 1) : v.flags(pos);
    if (f2.is_letter()) {
      pos += (cpt == ' ');
      while (f2.is_letter()) f2 = v.flags(++pos);
      sink.add(pos);
      continue;
    }
    if (f2.is_number()) {
      pos += (cpt == ' ');
      while (f2.is_number()) f2 = v.flags(++pos);
      sink.add(pos);
      continue;
    }
    if (is_other(f2)) {
      pos += (cpt == ' ');
      while (is_other(f2)) f2 = v.flags(++pos);
      sink.add(pos);
      continue;
    }
    size_t num_ws = 0;
    while (v.flags(pos + num_ws).is_whitespace()) ++num_ws;
    if (num_ws > 1 && v.cpt(pos + num_ws) != kOutOfRange) {  // \s+(?!\S): leave the last one
      pos += num_ws - 1;
      sink.add(pos);
      continue;
    }
    if (num_ws > 0) {
      pos += num_ws;
      sink.add(pos);
      continue;
    }
    sink.add(++pos);
  }
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
//  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
void split_llama3(const PieceView& v, Offsets& out, size_t max_digits) {
  PieceSink sink(out, v.begin());
  for (size_t pos = v.begin(); pos < v.end();) {
    const uint32_t cpt = v.cpt(pos);
    const CodepointFlags flags = v.flags(pos);
    if (const size_t n = match_contraction(v, pos, true)) {
      pos += sink.add(pos + n);
      continue;
    }
    if (!(cpt == '\r' || cpt == '\n' || flags.is_number())) {
      if (flags.is_letter() || v.flags(pos + 1).is_letter()) {
        ++pos;
        while (v.flags(pos).is_letter()) ++pos;
        sink.add(pos);
        continue;
      }
    }
    if (flags.is_number()) {
      size_t ini = pos;
      while (v.flags(pos).is_number()) {
        if (++pos - ini >= max_digits) {
          sink.add(pos);
          ini = pos;
        }
      }
      sink.add(pos);
      continue;
    }
    CodepointFlags f2 = (cpt == ' ') ? v.flags(pos + 1) : flags;
    if (!(f2.is_whitespace() || f2.is_letter() || f2.is_number()) && flags.is_defined()) {
      pos += (cpt == ' ');
      while (is_other(f2)) f2 = v.flags(++pos);
      uint32_t c2 = v.cpt(pos);
      while (c2 == '\r' || c2 == '\n') c2 = v.cpt(++pos);
      sink.add(pos);
      continue;
    }
    size_t num_ws = 0;
    size_t last_end_r_or_n = 0;
    while (v.flags(pos + num_ws).is_whitespace()) {
      const uint32_t c2 = v.cpt(pos + num_ws);
      if (c2 == '\r' || c2 == '\n') last_end_r_or_n = pos + num_ws + 1;
      ++num_ws;
    }
    if (last_end_r_or_n > 0) {  // \s*[\r\n]+
      pos = last_end_r_or_n;
      sink.add(pos);
      continue;
    }
    if (num_ws > 1 && v.cpt(pos + num_ws) != kOutOfRange) {
      pos += num_ws - 1;
      sink.add(pos);
      continue;
    }
    if (num_ws > 0) {
      pos += num_ws;
      sink.add(pos);
      continue;
    }
    sink.add(++pos);
  }
}

// A regex that matches single code points or runs of them: matches and the gaps between them
// both become pieces (llama.cpp's unicode_regex_split_stl).
template <typename Pred>
void split_matches(const PieceView& v, Offsets& out, Pred pred, bool runs) {
  PieceSink sink(out, v.begin());
  size_t pos = v.begin();
  while (pos < v.end()) {
    if (!pred(v.cpt(pos))) {
      ++pos;
      continue;
    }
    sink.add(pos);  // the gap before the match
    ++pos;
    if (runs) {
      while (pos < v.end() && pred(v.cpt(pos))) ++pos;
    }
    sink.add(pos);
  }
  sink.add(v.end());
}

// [0-9][0-9][0-9]: leftmost, non-overlapping triples of ASCII digits.
void split_digit_triples(const PieceView& v, Offsets& out) {
  PieceSink sink(out, v.begin());
  auto digit = [&](size_t p) {
    const uint32_t c = v.cpt(p);
    return c >= '0' && c <= '9';
  };
  size_t pos = v.begin();
  while (pos + 3 <= v.end()) {
    if (digit(pos) && digit(pos + 1) && digit(pos + 2)) {
      sink.add(pos);
      pos += 3;
      sink.add(pos);
    } else {
      ++pos;
    }
  }
  sink.add(v.end());
}

// The collapsed-category classes of llama.cpp's std::regex fallback: ASCII by the literal set,
// everything else by category (whitespace first).
bool is_number_class(uint32_t c) {
  if (c < 128) return c >= '0' && c <= '9';
  const CodepointFlags f = flags_of(c);
  return !f.is_whitespace() && f.category == unicode::kNumber;
}

bool is_default_punct_class(uint32_t c) {  // [\p{P}\$\+<=>\^~\|`]
  if (c < 128) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
  }
  const CodepointFlags f = flags_of(c);
  return !f.is_whitespace() && f.category == unicode::kPunctuation;
}

template <typename Pass>
Offsets apply_pass(const std::vector<char32_t>& cpts, const Offsets& in, Pass pass) {
  Offsets out;
  out.reserve(in.size() * 2);
  size_t start = 0;
  for (const size_t len : in) {
    pass(PieceView(cpts, start, start + len), out);
    start += len;
  }
  return out;
}

}  // namespace

PreTokenizerKind PreTokenizer::kind_from_name(std::string_view pre) {
  if (pre == "default") return PreTokenizerKind::kDefault;
  if (pre == "gpt-2" || pre == "phi-2" || pre == "jina-es" || pre == "jina-de" ||
      pre == "gigachat" || pre == "jina-v2-es" || pre == "jina-v2-de" || pre == "roberta-bpe") {
    return PreTokenizerKind::kGpt2;
  }
  if (pre == "smollm") return PreTokenizerKind::kSmollm;
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3" ||
      pre == "pixtral" || pre == "lfm2") {
    return PreTokenizerKind::kLlama3;
  }
  if (pre == "qwen2" || pre == "stablelm2" || pre == "hunyuan" || pre == "deepseek-r1-qwen" ||
      pre == "megrez") {
    return PreTokenizerKind::kQwen2;
  }
  throw std::runtime_error("unknown pre-tokenizer type '" + std::string(pre) +
                           "' (tokenizer.ggml.pre); supported: default, gpt-2, smollm, llama3 "
                           "(llama-bpe, llama-v3), qwen2");
}

std::vector<size_t> PreTokenizer::split_codepoints(const std::vector<char32_t>& cpts) const {
  Offsets offsets;
  if (cpts.empty()) return offsets;
  offsets.push_back(cpts.size());
  auto gpt2 = [](const PieceView& v, Offsets& out) { split_gpt2(v, out); };
  switch (kind_) {
    case PreTokenizerKind::kDefault:
      offsets = apply_pass(cpts, offsets, [](const PieceView& v, Offsets& out) {
        split_matches(v, out, is_default_punct_class, /*runs=*/true);
      });
      offsets = apply_pass(cpts, offsets, gpt2);
      offsets = apply_pass(cpts, offsets, split_digit_triples);
      break;
    case PreTokenizerKind::kGpt2: offsets = apply_pass(cpts, offsets, gpt2); break;
    case PreTokenizerKind::kSmollm:
      offsets = apply_pass(cpts, offsets, [](const PieceView& v, Offsets& out) {
        split_matches(v, out, is_number_class, /*runs=*/false);
      });
      offsets = apply_pass(cpts, offsets, gpt2);
      break;
    case PreTokenizerKind::kLlama3:
      offsets = apply_pass(cpts, offsets,
                           [](const PieceView& v, Offsets& out) { split_llama3(v, out, 3); });
      break;
    case PreTokenizerKind::kQwen2:
      offsets = apply_pass(cpts, offsets,
                           [](const PieceView& v, Offsets& out) { split_llama3(v, out, 1); });
      break;
  }
  return offsets;
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  const std::vector<char32_t> cpts = unicode::decode_lenient(text);
  const Offsets offsets = split_codepoints(cpts);
  std::vector<std::string> pieces;
  pieces.reserve(offsets.size());
  std::string utf8;
  size_t start = 0;
  for (const size_t len : offsets) {
    utf8.clear();
    for (size_t i = start; i < start + len; ++i) unicode::append_utf8(utf8, cpts[i]);
    std::string mapped;
    mapped.reserve(utf8.size() * 2);
    for (const char c : utf8) mapped.append(unicode::byte_to_mapped_utf8(static_cast<uint8_t>(c)));
    pieces.push_back(std::move(mapped));
    start += len;
  }
  return pieces;
}

}  // namespace troupe::model
