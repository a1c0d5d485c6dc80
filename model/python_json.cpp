// Python-style JSON dumping (see python_json.hpp).
#include "model/python_json.hpp"

#include <cmath>

#include <fmt/format.h>
#include <simdjson.h>

#include "model/json_string.hpp"

namespace troupe::model {
namespace {

namespace dom = simdjson::dom;

void dump_string(std::string_view s, std::string& out) {
  append_json_string(out, s, JsonStringStyle::kPython);
}

void newline(int indent, int depth, std::string& out) {
  out.push_back('\n');
  out.append(static_cast<size_t>(indent * depth), ' ');
}

void dump(dom::element e, int indent, int depth, std::string& out) {
  switch (e.type()) {
    case dom::element_type::OBJECT: {
      const dom::object o(e);
      if (o.size() == 0) {
        out += "{}";
        return;
      }
      out.push_back('{');
      bool first = true;
      for (const dom::key_value_pair kv : o) {
        if (!first) out += indent < 0 ? ", " : ",";
        first = false;
        if (indent >= 0) newline(indent, depth + 1, out);
        dump_string(kv.key, out);
        out += ": ";
        dump(kv.value, indent, depth + 1, out);
      }
      if (indent >= 0) newline(indent, depth, out);
      out.push_back('}');
      return;
    }
    case dom::element_type::ARRAY: {
      const dom::array a(e);
      if (a.size() == 0) {
        out += "[]";
        return;
      }
      out.push_back('[');
      bool first = true;
      for (dom::element item : a) {
        if (!first) out += indent < 0 ? ", " : ",";
        first = false;
        if (indent >= 0) newline(indent, depth + 1, out);
        dump(item, indent, depth + 1, out);
      }
      if (indent >= 0) newline(indent, depth, out);
      out.push_back(']');
      return;
    }
    case dom::element_type::STRING: dump_string(std::string_view(e), out); return;
    case dom::element_type::INT64: out += fmt::format("{}", int64_t(e)); return;
    case dom::element_type::UINT64: out += fmt::format("{}", uint64_t(e)); return;
    case dom::element_type::DOUBLE: {
      const double v = double(e);
      std::string text = fmt::format("{}", v);
      // Python's repr: whole floats keep ".0" (1.0), exponents look like 1e+20.
      if (std::isfinite(v) && text.find_first_of(".en") == std::string::npos) text += ".0";
      out += text;
      return;
    }
    case dom::element_type::BOOL: out += bool(e) ? "true" : "false"; return;
    case dom::element_type::NULL_VALUE: out += "null"; return;
  }
}

}  // namespace

std::optional<std::string> python_json_dumps(std::string_view json, int indent) {
  thread_local dom::parser parser;
  const simdjson::padded_string padded(json);
  dom::element root;
  if (parser.parse(padded).get(root)) return std::nullopt;
  std::string out;
  dump(root, indent, 0, out);
  return out;
}

}  // namespace troupe::model
