// UTF-8 codecs, category look-up and the GPT-2 byte map (see unicode.hpp).
#include "model/unicode.hpp"

#include <algorithm>
#include <array>

namespace troupe::model::unicode {
namespace {

// Latin-1 is by far the most common input; a direct table avoids the binary search for it.
struct Latin1Table {
  std::array<CodepointFlags, 256> flags{};
};

CodepointFlags lookup_slow(char32_t cp) {
  CodepointFlags f;
  if (cp > kMaxCodepoint) {
    f.category = kUndefined;
    return f;
  }
  const auto* begin = detail::kCategoryRanges;
  const auto* end = begin + detail::kNumCategoryRanges;
  const auto* it = std::upper_bound(
      begin, end, cp, [](char32_t c, const detail::CategoryRange& r) { return c < r.first; });
  f.category = (it == begin) ? static_cast<uint8_t>(kUndefined) : (it - 1)->flag;
  for (size_t i = 0; i < detail::kNumWhitespaceRanges; ++i) {
    if (cp >= detail::kWhitespaceRanges[i].first && cp <= detail::kWhitespaceRanges[i].last) {
      f.whitespace = true;
      break;
    }
  }
  return f;
}

const Latin1Table& latin1_table() {
  static const Latin1Table table = [] {
    Latin1Table t;
    for (char32_t cp = 0; cp < 256; ++cp) t.flags[cp] = lookup_slow(cp);
    return t;
  }();
  return table;
}

struct ByteMap {
  std::array<char32_t, 256> to_cp{};
  std::array<std::string, 256> to_utf8;
  std::array<int16_t, 0x144> from_cp{};  // code points below U+0144 only; -1 = none
};

const ByteMap& byte_map() {
  static const ByteMap map = [] {
    ByteMap m;
    m.from_cp.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      m.to_cp[b] = printable ? static_cast<char32_t>(b) : next++;
      append_utf8(m.to_utf8[b], m.to_cp[b]);
      m.from_cp[m.to_cp[b]] = static_cast<int16_t>(b);
    }
    return m;
  }();
  return map;
}

bool is_continuation(uint8_t b) {
  return (b & 0xC0) == 0x80;
}

}  // namespace

CodepointFlags flags_of(char32_t cp) {
  if (cp < 256) return latin1_table().flags[cp];
  return lookup_slow(cp);
}

const char* unicode_tables_version() {
  return detail::kUnicodeVersion;
}

size_t utf8_length_from_lead(uint8_t lead) {
  static constexpr uint8_t kLookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLookup[lead >> 4];
}

std::vector<char32_t> decode_lenient(std::string_view text) {
  // Mirrors llama.cpp unicode_cpt_from_utf8 + unicode_cpts_from_utf8: the lead byte's high bits
  // pick the length, continuation bytes must be 10xxxxxx, nothing else is checked.
  std::vector<char32_t> out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b0 = s[i];
    if (!(b0 & 0x80)) {
      out.push_back(b0);
      i += 1;
      continue;
    }
    size_t len = 0;
    char32_t cp = 0;
    if (!(b0 & 0x40)) {
      len = 0;  // stray continuation byte
    } else if (!(b0 & 0x20)) {
      len = 2;
      cp = b0 & 0x1F;
    } else if (!(b0 & 0x10)) {
      len = 3;
      cp = b0 & 0x0F;
    } else if (!(b0 & 0x08)) {
      len = 4;
      cp = b0 & 0x07;
    }
    bool ok = len != 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      if (!is_continuation(s[i + k])) ok = false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (ok && cp <= kMaxCodepoint) {
      out.push_back(cp);
      i += len;
    } else {
      out.push_back(kReplacementChar);
      i += 1;
    }
  }
  return out;
}

Utf8Decoded decode_strict(std::string_view text, size_t offset) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  const uint8_t b0 = s[offset];
  Utf8Decoded r;
  if (b0 < 0x80) {
    r.codepoint = b0;
    return r;
  }
  size_t len = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  char32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    r.status = Utf8Status::kInvalid;
    r.length = 1;
    return r;
  }
  for (size_t k = 1; k < len; ++k) {
    if (offset + k >= n) {
      r.status = Utf8Status::kIncomplete;
      r.length = n - offset;
      return r;
    }
    const uint8_t b = s[offset + k];
    const bool in_range = (k == 1) ? (b >= lo && b <= hi) : is_continuation(b);
    if (!in_range) {
      r.status = Utf8Status::kInvalid;
      r.length = k;  // the maximal valid prefix is one replacement
      return r;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  r.codepoint = cp;
  r.length = len;
  return r;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp > kMaxCodepoint) cp = kReplacementChar;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const Utf8Decoded d = decode_strict(text, i);
    if (d.status != Utf8Status::kOk) return false;
    i += d.length;
  }
  return true;
}

std::string sanitize_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Decoded d = decode_strict(text, i);
    if (d.status == Utf8Status::kOk) {
      out.append(text.substr(i, d.length));
    } else {
      append_utf8(out, kReplacementChar);
    }
    i += d.length;
  }
  return out;
}

char32_t byte_to_codepoint(uint8_t byte) {
  return byte_map().to_cp[byte];
}

std::string_view byte_to_mapped_utf8(uint8_t byte) {
  return byte_map().to_utf8[byte];
}

std::optional<uint8_t> codepoint_to_byte(char32_t cp) {
  if (cp >= 0x144) return std::nullopt;
  const int16_t b = byte_map().from_cp[cp];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

}  // namespace troupe::model::unicode
