// The settings list's interface (see settings.hpp): look-ups, the JSON walk, the tables.
#include "app/settings.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include <fmt/format.h>

#include "app/setting_builders.hpp"

namespace troupe::app {

namespace {

using simdjson::dom::element;

std::string markdown_cell(std::string text) {
  std::string out;
  for (const char ch : text) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

}  // namespace

const std::vector<Setting>& settings() {
  static const std::vector<Setting> list = build_settings();
  return list;
}

const Setting* setting_by_key(std::string_view key) {
  if (key.empty()) return nullptr;
  for (const Setting& s : settings()) {
    if (s.key == key) return &s;
  }
  return nullptr;
}

const Setting* setting_by_flag(std::string_view flag) {
  if (flag.empty()) return nullptr;
  for (const Setting& s : settings()) {
    if (s.flag == flag) return &s;
  }
  return nullptr;
}

bool is_settings_object(std::string_view prefix) {
  return std::any_of(settings().begin(), settings().end(), [prefix](const Setting& s) {
    return s.key.size() > prefix.size() && s.key.starts_with(prefix) && s.key[prefix.size()] == '.';
  });
}

void read_settings_object(ServerConfig& config, element value, const std::string& prefix) {
  simdjson::dom::object object;
  if (value.get_object().get(object) != simdjson::SUCCESS) {
    throw ConfigError(fmt::format("{}: expected an object", prefix.empty() ? "config" : prefix));
  }
  for (auto [key, field] : object) {
    const std::string path = prefix.empty() ? std::string(key) : prefix + "." + std::string(key);
    if (const Setting* s = setting_by_key(path)) {
      s->read_json(config, field, path);
    } else if (is_settings_object(path)) {
      read_settings_object(config, field, path);
    } else {
      throw ConfigError(fmt::format("{}: unknown config key", path));
    }
  }
}

std::string settings_table() {
  const ServerConfig defaults;
  std::string table = "| key | default | flag | meaning |\n|---|---|---|---|\n";
  for (const Setting& s : settings()) {
    if (s.key.empty()) continue;  // flag-only: listed by `troupe serve --help`
    table += fmt::format("| `{}` | `{}` | {} | {} |\n", s.key, markdown_cell(s.show(defaults)),
                         s.flag.empty() ? "" : "`" + s.flag + "`", markdown_cell(s.help));
  }
  return table;
}

std::string settings_flags_help() {
  constexpr size_t kIndent = 29, kWidth = 100;
  // Help text for a terminal: no Markdown code marks, links as their text, wrapped.
  auto plain = [](std::string_view text) {
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '`') continue;
      if (text[i] == ']' && i + 1 < text.size() && text[i + 1] == '(') {
        i = text.find(')', i);
        if (i == std::string_view::npos) break;
        continue;
      }
      if (text[i] != '[') out += text[i];
    }
    return out;
  };
  auto entry = [&](const std::string& name, const std::string& text) {
    std::string line = fmt::format("  {:<{}}", name, kIndent - 2);
    if (line.size() > kIndent) line += "\n" + std::string(kIndent, ' ');
    size_t column = kIndent, from = 0;
    while (from < text.size()) {
      size_t to = text.find(' ', from);
      if (to == std::string::npos) to = text.size();
      const std::string word = text.substr(from, to - from);
      if (column + word.size() + 1 > kWidth && column > kIndent) {
        line += "\n" + std::string(kIndent, ' ');
        column = kIndent;
      } else if (column > kIndent) {
        line += ' ';
        ++column;
      }
      line += word;
      column += word.size();
      from = to + 1;
    }
    return line + "\n";
  };
  std::string help;
  for (const Setting& s : settings()) {
    if (s.flag.empty()) continue;
    std::string metavar = s.value;
    if (metavar == "text" || metavar == "path") {
      metavar = s.key.substr(s.key.rfind('.') + 1);
      std::transform(metavar.begin(), metavar.end(), metavar.begin(), [](unsigned char c) {
        return c == '_' ? '-' : static_cast<char>(std::toupper(c));
      });
    }
    const std::string what = s.key.empty() ? "" : " (" + s.key + ")";
    help += entry(s.flag + " " + metavar, plain(s.help) + what);
  }
  help += entry("--set KEY=VALUE",
                "any setting by its config key, `troupe help settings` lists them; repeatable");
  return help;
}

}  // namespace troupe::app
