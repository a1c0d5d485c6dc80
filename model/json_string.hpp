// A JSON string literal: the one escaper of the tree, for the server's JSON (net/json_writer)
// and for the JSON texts rendered into prompts and tool grammars (python_json, tool_calling).
//
// `"`, `\` and control characters are escaped (\n, \t, ... or \u00XX); other text is kept as
// UTF-8. Ill-formed UTF-8 becomes U+FFFD, one per byte, so the output is always valid.
// The two styles differ in one byte only:
//   kStrict  DEL (0x7F) escaped too: what clients and terminals read back.
//   kPython  DEL kept raw, as Python's json.dumps(ensure_ascii=False) writes it (HF templates'
//            `tojson`), so a prompt matches the bytes the model was trained on.
//
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::model {

enum class JsonStringStyle : uint8_t { kStrict, kPython };

// Appends `text` to `out` as a quoted JSON string.
void append_json_string(std::string& out, std::string_view text,
                        JsonStringStyle style = JsonStringStyle::kStrict);

}  // namespace troupe::model
