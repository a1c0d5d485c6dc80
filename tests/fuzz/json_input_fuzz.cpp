// Fuzzes net/json_input.* (the checks that explain a bad request body) against simdjson, which
// parses the same bytes in the server:
//   - first_invalid_utf8 agrees with simdjson's UTF-8 validation, and the offset it reports
//     starts a bad sequence (the prefix before it is valid);
//   - a body simdjson accepts has no syntax error in find_json_syntax_error (else a valid
//     request would be described as malformed), unless it nests deeper than the checker's 512;
//   - describe_bad_json never throws and gives one line.
#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "net/json_input.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace troupe;

namespace {

// Nesting depth of a JSON text as simdjson accepted it (brackets outside strings).
size_t max_depth(std::string_view text) {
  size_t depth = 0;
  size_t deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// One input, checked; LLVMFuzzerTestOneInput below also bounds its CPU time.
void fuzz_one(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  const auto bad_utf8 = net::first_invalid_utf8(text);
  const bool simdjson_utf8 = simdjson::validate_utf8(text.data(), text.size());
  TROUPE_FUZZ_CHECK(bad_utf8.has_value() != simdjson_utf8,
                    "first_invalid_utf8 %s, simdjson says %s", bad_utf8 ? "rejects" : "accepts",
                    simdjson_utf8 ? "valid" : "invalid");
  if (bad_utf8) {
    TROUPE_FUZZ_CHECK(*bad_utf8 < size, "offset %zu past the end", *bad_utf8);
    TROUPE_FUZZ_CHECK(simdjson::validate_utf8(text.data(), *bad_utf8),
                      "the prefix before offset %zu is not valid UTF-8", *bad_utf8);
  }

  const auto syntax_error = net::find_json_syntax_error(text);
  if (syntax_error) {
    TROUPE_FUZZ_CHECK(syntax_error->offset <= size, "syntax error offset %zu past the end",
                      syntax_error->offset);
    TROUPE_FUZZ_CHECK(syntax_error->line >= 1 && syntax_error->column >= 1, "0-based position");
    TROUPE_FUZZ_CHECK(!syntax_error->what.empty(), "empty error text");
  }
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  const bool simdjson_ok = parser.parse(simdjson::padded_string(text)).get(root) == simdjson::SUCCESS;
  if (simdjson_ok && max_depth(text) <= 512) {
    TROUPE_FUZZ_CHECK(!syntax_error, "simdjson accepts the text; the checker reports '%s' at %zu",
                      syntax_error->what.c_str(), syntax_error->offset);
  }

  const std::string message = net::describe_bad_json(text, "fallback");
  TROUPE_FUZZ_CHECK(!message.empty(), "empty description");
  // The description goes into an error response: it must not carry the body's raw bytes.
  TROUPE_FUZZ_CHECK(message.find('\n') == std::string::npos, "multi-line description");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::within_cpu_budget("json_input", size, 2.0, 50.0, [&] { fuzz_one(data, size); });
  return 0;
}
