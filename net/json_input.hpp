// Checks on request bytes before and after simdjson parses them: UTF-8 validity, and where a
// malformed JSON text first goes wrong (simdjson reports what failed, not where).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace troupe::net {

// The offset of the first byte that is not part of valid UTF-8 (overlong forms, surrogates and
// code points above U+10FFFF are invalid), or nullopt when `text` is valid.
std::optional<size_t> first_invalid_utf8(std::string_view text);

struct JsonSyntaxError {
  size_t offset = 0;  // bytes from the start
  size_t line = 1;    // 1-based
  size_t column = 1;  // 1-based, in bytes
  std::string what;   // "expected ':' after an object key", ...
};

// The first syntax error in `text` read as one JSON value, or nullopt when it is well-formed.
// Strings are checked for escapes and control characters, not for UTF-8 (see above).
std::optional<JsonSyntaxError> find_json_syntax_error(std::string_view text);

// A one-line message for a body that is not JSON: the syntax error and its position, or the
// invalid UTF-8 offset; `fallback` when neither check finds the fault.
std::string describe_bad_json(std::string_view text, std::string_view fallback);

}  // namespace troupe::net
