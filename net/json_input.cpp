#include "net/json_input.hpp"

#include <cctype>
#include <cstdint>

#include <fmt/format.h>

namespace troupe::net {

std::optional<size_t> first_invalid_utf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t size = text.size();
  size_t i = 0;
  while (i < size) {
    const unsigned char lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    uint32_t code = 0;
    if ((lead & 0xE0) == 0xC0) {
      length = 2;
      code = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3;
      code = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4;
      code = lead & 0x07;
    } else {
      return i;
    }
    if (i + length > size) return i;
    for (size_t k = 1; k < length; ++k) {
      if ((bytes[i + k] & 0xC0) != 0x80) return i;
      code = (code << 6) | (bytes[i + k] & 0x3F);
    }
    const bool overlong = (length == 2 && code < 0x80) || (length == 3 && code < 0x800) ||
                          (length == 4 && code < 0x10000);
    if (overlong || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return i;
    i += length;
  }
  return std::nullopt;
}

namespace {

// A recursive-descent JSON checker that stops at the first error. Depth is bounded so a hostile
// body cannot overflow the stack.
class SyntaxChecker {
 public:
  explicit SyntaxChecker(std::string_view text) : text_(text) {}

  std::optional<JsonSyntaxError> run() {
    skip_space();
    if (!value(0)) return error_;
    skip_space();
    if (pos_ != text_.size()) fail("unexpected data after the JSON value");
    return error_;
  }

 private:
  bool fail(std::string what) {
    if (error_) return false;
    JsonSyntaxError e;
    e.offset = pos_;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++e.line;
        e.column = 1;
      } else {
        ++e.column;
      }
    }
    e.what = std::move(what);
    error_ = std::move(e);
    return false;
  }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) {
      ++pos_;
    }
  }
  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return fail("invalid literal");
    pos_ += word.size();
    return true;
  }

  bool value(int depth) {
    if (depth > 512) return fail("nesting too deep");
    if (at_end()) return fail("unexpected end of input");
    switch (peek()) {
      case '{': return object(depth);
      case '[': return array(depth);
      case '"': return string();
      case 't': return literal("true");
      case 'f': return literal("false");
      case 'n': return literal("null");
      default: return number();
    }
  }

  // An object or an array: `item` reads one member or element (after white space); items are
  // separated by ',' and the container ends at `close`.
  template <typename Item>
  bool container(char close, const char* expected_after_item, Item item) {
    ++pos_;
    skip_space();
    if (peek() == close) {
      ++pos_;
      return true;
    }
    while (true) {
      skip_space();
      if (!item()) return false;
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == close) {
        ++pos_;
        return true;
      }
      return fail(at_end() ? "unexpected end of input" : expected_after_item);
    }
  }

  bool object(int depth) {
    return container('}', "expected ',' or '}' in an object", [this, depth] {
      if (peek() != '"') return fail("expected a string key");
      if (!string()) return false;
      skip_space();
      if (peek() != ':') return fail("expected ':' after an object key");
      ++pos_;
      skip_space();
      return value(depth + 1);
    });
  }

  bool array(int depth) {
    return container(']', "expected ',' or ']' in an array",
                     [this, depth] { return value(depth + 1); });
  }

  bool string() {
    ++pos_;  // the opening quote
    while (!at_end()) {
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return fail("control character in a string");
      if (c == '\\') {
        ++pos_;
        const char e = peek();
        if (e == 'u') {
          for (int k = 1; k <= 4; ++k) {
            if (!std::isxdigit(static_cast<unsigned char>(
                    pos_ + k < text_.size() ? text_[pos_ + k] : 'x'))) {
              return fail("invalid \\u escape");
            }
          }
          pos_ += 4;
        } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos || e == '\0') {
          return fail("invalid escape in a string");
        }
      }
      ++pos_;
    }
    return fail("unterminated string");
  }

  bool number() {
    const size_t start = pos_;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (std::isdigit(static_cast<unsigned char>(peek()))) {
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    } else {
      pos_ = start;
      return fail("unexpected character");
    }
    if (peek() == '.') {
      ++pos_;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) return fail("invalid number");
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) return fail("invalid number");
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    }
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::optional<JsonSyntaxError> error_;
};

}  // namespace

std::optional<JsonSyntaxError> find_json_syntax_error(std::string_view text) {
  return SyntaxChecker(text).run();
}

std::string describe_bad_json(std::string_view text, std::string_view fallback) {
  if (const auto bad = first_invalid_utf8(text)) {
    return fmt::format("request body is not valid UTF-8 (invalid byte at offset {})", *bad);
  }
  if (const auto error = find_json_syntax_error(text)) {
    return fmt::format("malformed JSON at line {} column {} (offset {}): {}", error->line,
                       error->column, error->offset, error->what);
  }
  return fmt::format("malformed JSON: {}", fallback);
}

}  // namespace troupe::net
