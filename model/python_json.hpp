// JSON text re-written the way Python's json.dumps writes it (ensure_ascii=False, key order
// kept): what HF chat templates' `tojson` filter puts into a prompt, so that a tool signature or
// an earlier call's arguments reach the model in the layout it was trained on.
//   indent < 0: one line, separators ", " and ": "   ({"a": 1, "b": [1, 2]})
//   indent >= 0: one item per line, that many spaces per level, separators "," and ": "
// Integers print as integers, other numbers as the shortest round-trip form with Python's ".0"
// for whole floats.
//
// Thread-safety: pure functions (a thread_local parser inside).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace troupe::model {

// nullopt when `json` is not valid JSON.
std::optional<std::string> python_json_dumps(std::string_view json, int indent = -1);

}  // namespace troupe::model
