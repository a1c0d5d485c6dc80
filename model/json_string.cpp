// The JSON string escaper (see json_string.hpp).
#include "model/json_string.hpp"

#include <fmt/format.h>

#include "model/unicode.hpp"

namespace troupe::model {

void append_json_string(std::string& out, std::string_view text, JsonStringStyle style) {
  out.push_back('"');
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const unicode::Utf8Decoded d = unicode::decode_strict(text, i);
      if (d.status == unicode::Utf8Status::kOk) {
        out.append(text.substr(i, d.length));
        i += d.length;
      } else {
        out += "\xEF\xBF\xBD";  // U+FFFD for each invalid byte
        ++i;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (c == 0x7F && style == JsonStringStyle::kStrict)) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out.push_back('"');
}

}  // namespace troupe::model
