#include "net/multipart.hpp"

#include <algorithm>
#include <cctype>
#include <functional>
#include <utility>

#include <fmt/format.h>

#include "net/json_input.hpp"

namespace troupe::net {
namespace {

constexpr size_t kMaxBoundaryBytes = 70;       // RFC 2046 §5.1.1
constexpr size_t kMaxHeaderBlockBytes = 8192;  // a part's header lines, each with its CRLF
constexpr size_t kMaxParameters = 16;          // of one header value; form-data uses 1..3
constexpr size_t kMaxShownBytes = 100;         // of client text quoted in an error message
constexpr std::string_view kCrlf = "\r\n";

MultipartError error(std::string message) {
  return MultipartError{std::move(message)};
}

// Client text for an error message: at most kMaxShownBytes, printable ASCII only (a cut UTF-8
// sequence or a control character must not reach the JSON error body).
std::string shown(std::string_view text) {
  std::string out(text.substr(0, kMaxShownBytes));
  for (char& c : out) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte > 0x7e) c = '?';
  }
  if (text.size() > kMaxShownBytes) out += "...";
  return out;
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

bool is_padding(char c) {
  return c == ' ' || c == '\t';
}

std::string_view trim_padding(std::string_view text) {
  while (!text.empty() && is_padding(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_padding(text.back())) text.remove_suffix(1);
  return text;
}

// RFC 9110 §5.6.2 tchar.
bool is_token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), is_token_char);
}

// A control character other than HTAB: never valid in a header line (RFC 9110 §5.5).
bool is_control(char c) {
  const auto byte = static_cast<unsigned char>(c);
  return (byte < 0x20 && c != '\t') || byte == 0x7f;
}

// RFC 2046 §5.1.1 bchars: what a boundary may hold (a space, but not as its last character).
bool is_boundary_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("'()+_,-./:=? ").find(c) != std::string_view::npos;
}

// ---- `value; name=token; name="quoted \"string\""` (Content-Type, Content-Disposition) ----

struct Parameter {
  std::string_view name;  // compared ignoring case
  std::string value;      // a quoted-string's escapes undone
};

struct ParameterizedValue {
  std::string_view type;  // before the first ';', padding trimmed
  std::vector<Parameter> parameters;
};

// A quoted-string (RFC 9110 §5.6.4) at the start of `text`: its value, and `text` advanced
// past it; nullopt when it is unterminated or holds a control character.
std::optional<std::string> read_quoted_string(std::string_view& text) {
  std::string value;
  for (size_t i = 1; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      text.remove_prefix(i + 1);
      return value;
    }
    if (c == '\\') {
      if (++i == text.size()) return std::nullopt;
      c = text[i];
    }
    if (is_control(c)) return std::nullopt;
    value += c;
  }
  return std::nullopt;
}

// `type *( OWS ";" OWS name "=" ( token / quoted-string ) ) OWS`, empty parameters (";;", a
// trailing ';') allowed; a message saying what is malformed otherwise. A parameter named twice
// is malformed: which one counts would be a guess. At most kMaxParameters, which also bounds
// the search for a repeated name (8 KiB of `;a=b` would otherwise cost ~10^6 comparisons).
std::variant<ParameterizedValue, std::string> parse_parameterized(std::string_view text) {
  ParameterizedValue parsed;
  const size_t semicolon = text.find(';');
  parsed.type = trim_padding(text.substr(0, semicolon));
  text = semicolon == std::string_view::npos ? std::string_view() : text.substr(semicolon + 1);
  while (!(text = trim_padding(text)).empty()) {
    if (text.front() == ';') {
      text.remove_prefix(1);
      continue;
    }
    const size_t equals = text.find('=');
    const std::string_view name = text.substr(0, equals);
    if (equals == std::string_view::npos || !is_token(name)) {
      return fmt::format("parameter '{}' is not name=value", shown(text.substr(0, text.find(';'))));
    }
    if (parsed.parameters.size() == kMaxParameters) {
      return fmt::format("more than {} parameters", kMaxParameters);
    }
    text.remove_prefix(equals + 1);
    Parameter parameter{.name = name, .value = {}};
    if (!text.empty() && text.front() == '"') {
      std::optional<std::string> value = read_quoted_string(text);
      if (!value) return fmt::format("parameter '{}' has an unterminated quoted value", name);
      parameter.value = std::move(*value);
    } else {
      const std::string_view token = trim_padding(text.substr(0, text.find(';')));
      if (!is_token(token)) {
        return fmt::format("parameter '{}' has a value that is neither a token nor quoted", name);
      }
      parameter.value = token;
      text.remove_prefix(std::min(text.size(), text.find(';')));
    }
    text = trim_padding(text);
    if (!text.empty() && text.front() != ';') {
      return fmt::format("parameter '{}' is followed by '{}' instead of ';'", name, shown(text));
    }
    for (const Parameter& earlier : parsed.parameters) {
      if (equals_ignoring_case(earlier.name, name)) {
        return fmt::format("parameter '{}' appears twice", name);
      }
    }
    parsed.parameters.push_back(std::move(parameter));
  }
  return parsed;
}

const Parameter* find_parameter(const ParameterizedValue& value, std::string_view name) {
  for (const Parameter& parameter : value.parameters) {
    if (equals_ignoring_case(parameter.name, name)) return &parameter;
  }
  return nullptr;
}

// ---- The request's Content-Type ----

std::variant<std::string, MultipartError> boundary_of(std::string_view content_type) {
  if (trim_padding(content_type).empty()) {
    return error("a multipart/form-data body needs a Content-Type header with its boundary");
  }
  auto parsed = parse_parameterized(content_type);
  if (const auto* why = std::get_if<std::string>(&parsed)) {
    return error(fmt::format("Content-Type '{}' is malformed: {}", shown(content_type), *why));
  }
  const ParameterizedValue& value = std::get<ParameterizedValue>(parsed);
  if (!equals_ignoring_case(value.type, "multipart/form-data")) {
    return error(fmt::format("Content-Type '{}' is not multipart/form-data", shown(value.type)));
  }
  const Parameter* boundary = find_parameter(value, "boundary");
  if (boundary == nullptr) {
    return error(fmt::format("Content-Type '{}' has no boundary parameter", shown(content_type)));
  }
  const std::string_view text = boundary->value;
  if (text.empty() || text.size() > kMaxBoundaryBytes || text.back() == ' ' ||
      !std::all_of(text.begin(), text.end(), is_boundary_char)) {
    return error(fmt::format(
        "boundary '{}' must be 1 to 70 letters, digits or '()+_,-./:=? (RFC 2046), not ending "
        "in a space",
        shown(text)));
  }
  return std::string(text);
}

// ---- Delimiter lines ----

enum class DelimiterKind { kPart, kClose };

struct DelimiterEnd {
  DelimiterKind kind;
  size_t next = 0;  // kPart: where the part's header block starts
};

// Reads what follows "--" boundary at `at`: "--" (the close delimiter) or padding and CRLF.
// After the close delimiter only padding, then the end or CRLF and the epilogue, may follow.
std::variant<DelimiterEnd, MultipartError> read_delimiter_end(std::string_view body, size_t at,
                                                              std::string_view dash_boundary) {
  std::string_view rest = body.substr(at);
  const bool close = rest.starts_with("--");
  if (close) rest.remove_prefix(2);
  while (!rest.empty() && is_padding(rest.front())) rest.remove_prefix(1);
  if (close) {
    if (rest.empty() || rest.starts_with(kCrlf)) return DelimiterEnd{.kind = DelimiterKind::kClose};
    return error(fmt::format("the close delimiter '{}--' is followed by '{}' instead of CRLF",
                             shown(dash_boundary), shown(rest.substr(0, 16))));
  }
  if (rest.empty()) {
    return error(
        fmt::format("the body ends after a delimiter: the close delimiter '{}--' is "
                    "missing",
                    shown(dash_boundary)));
  }
  if (!rest.starts_with(kCrlf)) {
    return error(
        fmt::format("delimiter '{}' is followed by '{}' instead of CRLF (the boundary "
                    "must not appear inside a part)",
                    shown(dash_boundary), shown(rest.substr(0, 16))));
  }
  return DelimiterEnd{.kind = DelimiterKind::kPart, .next = body.size() - rest.size() + 2};
}

// ---- A part's header block ----

struct HeaderBlock {
  std::string_view lines;  // every header line with its CRLF; empty when the part has none
  size_t body_start = 0;   // just past the empty line that ends the block
};

// NOTE: the search for the empty line is bounded by kMaxHeaderBlockBytes, so a body with no
// empty line costs 8 KiB per part, not a scan of the rest of the body.
std::variant<HeaderBlock, MultipartError> find_header_block(std::string_view body, size_t start,
                                                            std::string_view delimiter,
                                                            size_t part_number) {
  const std::string_view window = body.substr(start, kMaxHeaderBlockBytes + 2);
  if (window.starts_with(kCrlf)) return HeaderBlock{.lines = {}, .body_start = start + 2};
  const size_t blank = window.find("\r\n\r\n");
  if (blank == std::string_view::npos) {
    if (start + window.size() == body.size()) {
      return error(fmt::format("the headers of part {} are not ended by an empty line (CRLF CRLF)",
                               part_number));
    }
    return error(
        fmt::format("the headers of part {} exceed {} bytes", part_number, kMaxHeaderBlockBytes));
  }
  const std::string_view lines = window.substr(0, blank + 2);
  // A delimiter line among the headers: the part had no empty line before the next one.
  if (lines.starts_with(delimiter.substr(2)) || lines.find(delimiter) != std::string_view::npos) {
    return error(
        fmt::format("the headers of part {} are not ended by an empty line (CRLF CRLF) "
                    "before the next delimiter",
                    part_number));
  }
  return HeaderBlock{.lines = lines, .body_start = start + blank + 4};
}

// 0..15, or -1 for a character that is not a hex digit.
int hex_digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// RFC 8187 ext-value, `charset'[language]'percent-encoded`, decoded to UTF-8; nullopt when
// malformed, in another charset than UTF-8 or ISO-8859-1, or not valid UTF-8 once decoded.
std::optional<std::string> decode_ext_value(std::string_view text) {
  const size_t first_quote = text.find('\'');
  const size_t second_quote = text.find('\'', first_quote + 1);
  if (first_quote == std::string_view::npos || second_quote == std::string_view::npos) {
    return std::nullopt;
  }
  const std::string_view charset = text.substr(0, first_quote);
  const bool latin1 = equals_ignoring_case(charset, "ISO-8859-1");
  if (!latin1 && !equals_ignoring_case(charset, "UTF-8")) return std::nullopt;
  const std::string_view encoded = text.substr(second_quote + 1);
  std::string decoded;
  for (size_t i = 0; i < encoded.size(); ++i) {
    unsigned char byte = static_cast<unsigned char>(encoded[i]);
    if (byte == '%') {
      const int high = encoded.size() - i >= 3 ? hex_digit_value(encoded[i + 1]) : -1;
      const int low = encoded.size() - i >= 3 ? hex_digit_value(encoded[i + 2]) : -1;
      if (high < 0 || low < 0) return std::nullopt;
      byte = static_cast<unsigned char>(high * 16 + low);
      i += 2;
    } else if (!std::isalnum(byte) &&
               std::string_view("!#$&+-.^_`|~").find(encoded[i]) == std::string_view::npos) {
      return std::nullopt;  // RFC 8187 attr-char
    }
    if (latin1 && byte >= 0x80) {
      decoded += static_cast<char>(0xc0 | (byte >> 6));
      decoded += static_cast<char>(0x80 | (byte & 0x3f));
    } else {
      decoded += static_cast<char>(byte);
    }
  }
  if (first_invalid_utf8(decoded).has_value()) return std::nullopt;
  return decoded;
}

// `form-data; name="..."[; filename="..."][; filename*=UTF-8''...]` into `part`; filename*
// wins over filename (RFC 6266 §4.3).
std::optional<MultipartError> read_content_disposition(std::string_view value, size_t part_number,
                                                       MultipartPart& part) {
  auto parsed = parse_parameterized(value);
  if (const auto* why = std::get_if<std::string>(&parsed)) {
    return error(fmt::format("part {}'s Content-Disposition is malformed: {}", part_number, *why));
  }
  const ParameterizedValue& disposition = std::get<ParameterizedValue>(parsed);
  if (!equals_ignoring_case(disposition.type, "form-data")) {
    return error(fmt::format("part {}'s Content-Disposition is '{}', not form-data", part_number,
                             shown(disposition.type)));
  }
  const Parameter* name = find_parameter(disposition, "name");
  if (name == nullptr) {
    return error(fmt::format("part {}'s Content-Disposition has no name parameter", part_number));
  }
  part.name = name->value;
  if (const Parameter* filename = find_parameter(disposition, "filename")) {
    part.filename = filename->value;
  }
  if (const Parameter* extended = find_parameter(disposition, "filename*")) {
    part.filename = decode_ext_value(extended->value);
    if (!part.filename) {
      return error(
          fmt::format("part {}'s filename* '{}' is not charset'language'value with "
                      "UTF-8 or ISO-8859-1 percent-encoding (RFC 8187)",
                      part_number, shown(extended->value)));
    }
  }
  return std::nullopt;
}

// One header line, without its CRLF, as name and value; a message when malformed.
std::variant<std::pair<std::string_view, std::string_view>, std::string> split_header_line(
    std::string_view line) {
  if (line.find_first_of("\r\n") != std::string_view::npos) {
    return std::string("has a bare CR or LF (header lines end with CRLF)");
  }
  if (!line.empty() && is_padding(line.front())) {
    return std::string("starts with whitespace (folded header lines are not accepted)");
  }
  const size_t colon = line.find(':');
  const std::string_view name = line.substr(0, colon);
  if (colon == std::string_view::npos || !is_token(name)) {
    return fmt::format("'{}' is not 'Name: value'", shown(line));
  }
  const std::string_view value = trim_padding(line.substr(colon + 1));
  if (std::any_of(value.begin(), value.end(), is_control)) {
    return fmt::format("header '{}' holds a control character", name);
  }
  return std::pair{name, value};
}

// The part's name, filename and Content-Type from its header lines; body left empty.
std::variant<MultipartPart, MultipartError> parse_part_headers(std::string_view lines,
                                                               size_t part_number) {
  MultipartPart part;
  bool has_disposition = false;
  bool has_content_type = false;
  for (size_t line_number = 1; !lines.empty(); ++line_number) {
    const size_t end = lines.find(kCrlf);  // the block ends in CRLF, so never npos
    auto split = split_header_line(lines.substr(0, end));
    lines.remove_prefix(end + 2);
    if (const auto* why = std::get_if<std::string>(&split)) {
      return error(fmt::format("header line {} of part {} {}", line_number, part_number, *why));
    }
    const auto [name, value] = std::get<std::pair<std::string_view, std::string_view>>(split);
    if (equals_ignoring_case(name, "Content-Disposition")) {
      if (std::exchange(has_disposition, true)) {
        return error(fmt::format("part {} has two Content-Disposition headers", part_number));
      }
      if (auto failure = read_content_disposition(value, part_number, part)) return *failure;
    } else if (equals_ignoring_case(name, "Content-Type")) {
      if (std::exchange(has_content_type, true)) {
        return error(fmt::format("part {} has two Content-Type headers", part_number));
      }
      if (value.empty())
        return error(fmt::format("part {} has an empty Content-Type", part_number));
      part.content_type = value;
    } else if (equals_ignoring_case(name, "Content-Transfer-Encoding") &&
               !equals_ignoring_case(value, "binary") && !equals_ignoring_case(value, "8bit") &&
               !equals_ignoring_case(value, "7bit")) {
      // RFC 7578 §4.7: senders do not encode parts; decoding base64 here would be a guess.
      return error(
          fmt::format("part {} has Content-Transfer-Encoding '{}'; only binary, 8bit "
                      "and 7bit are accepted",
                      part_number, shown(value)));
    }
  }
  if (!has_disposition) {
    return error(fmt::format("part {} has no Content-Disposition header (form-data; name=...)",
                             part_number));
  }
  return part;
}

}  // namespace

std::variant<std::vector<MultipartPart>, MultipartError> parse_multipart_form(
    std::string_view body, std::string_view content_type, size_t max_parts) {
  auto boundary = boundary_of(content_type);
  if (auto* failure = std::get_if<MultipartError>(&boundary)) return std::move(*failure);
  // Every delimiter but a first one at offset 0 starts with the CRLF that ends the text before
  // it. NOTE: Boyer-Moore (with its good-suffix rule) finds the first occurrence in linear time
  // whatever the boundary and body, both the client's choice: string_view::find costs ~7 ns
  // per byte of a body of CRs (a memcmp at each), and Horspool ~35 ns per byte for a boundary of
  // 70 'a's over a body of 'a's; Boyer-Moore stays under 1 ns per byte on both.
  const std::string delimiter = "\r\n--" + std::get<std::string>(boundary);
  const std::string_view dash_boundary = std::string_view(delimiter).substr(2);
  const std::boyer_moore_searcher searcher(delimiter.begin(), delimiter.end());
  const auto find_delimiter = [&](size_t from) {
    const auto found = std::search(body.begin() + from, body.end(), searcher);
    return found == body.end() ? std::string_view::npos : static_cast<size_t>(found - body.begin());
  };

  size_t after_delimiter = dash_boundary.size();
  if (!body.starts_with(dash_boundary)) {
    const size_t first = find_delimiter(0);
    if (first == std::string_view::npos) {
      return error(fmt::format("the body holds no delimiter line '{}'", shown(dash_boundary)));
    }
    after_delimiter = first + delimiter.size();  // what came before was the preamble
  }
  std::vector<MultipartPart> parts;
  for (;;) {
    auto delimiter_end = read_delimiter_end(body, after_delimiter, dash_boundary);
    if (auto* failure = std::get_if<MultipartError>(&delimiter_end)) return std::move(*failure);
    const DelimiterEnd end = std::get<DelimiterEnd>(delimiter_end);
    if (end.kind == DelimiterKind::kClose) break;
    const size_t part_number = parts.size() + 1;
    if (parts.size() == max_parts) {
      return error(fmt::format("the body has more than {} parts", max_parts));
    }
    auto found_block = find_header_block(body, end.next, delimiter, part_number);
    if (auto* failure = std::get_if<MultipartError>(&found_block)) return std::move(*failure);
    const HeaderBlock block = std::get<HeaderBlock>(found_block);
    auto parsed = parse_part_headers(block.lines, part_number);
    if (auto* failure = std::get_if<MultipartError>(&parsed)) return std::move(*failure);
    // NOTE: the search starts at the empty line's CRLF: RFC 2046 lets a part end right after
    // its headers (`body-part := headers [CRLF *OCTET]`), its empty line then being the
    // delimiter's CRLF. A match there means an empty body; a later one is at body_start or after.
    const size_t body_end = find_delimiter(block.body_start - 2);
    if (body_end == std::string_view::npos) {
      return error(
          fmt::format("part {} is not followed by a delimiter: the close delimiter "
                      "'{}--' is missing",
                      part_number, shown(dash_boundary)));
    }
    MultipartPart& part = parts.emplace_back(std::move(std::get<MultipartPart>(parsed)));
    const size_t body_start = std::min(block.body_start, body_end);
    part.body = body.substr(body_start, body_end - body_start);
    after_delimiter = body_end + delimiter.size();
  }
  if (parts.empty()) return error("the body has no parts, only a close delimiter");
  return parts;
}

}  // namespace troupe::net
