// The typed builders of the settings list (settings_list.cpp): a reader for JSON and one for
// command-line text, the bounds, the help line and how the default is shown, made together so
// they cannot drift apart. Internal to app/ (settings.hpp is the interface).
//
// Thread-safety: pure functions building values.
#pragma once

#include <cctype>
#include <charconv>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "app/settings.hpp"

namespace troupe::app::setting_builders {

using simdjson::dom::element;
using std::chrono::milliseconds;

// ----- value readers, JSON and text, with the messages the config tests name -----

inline std::string json_string(element value, const std::string& where) {
  std::string_view text;
  if (value.get_string().get(text) != simdjson::SUCCESS) {
    throw ConfigError(fmt::format("{}: expected a string", where));
  }
  return std::string(text);
}

inline uint64_t checked(uint64_t number, const std::string& where, uint64_t min, uint64_t max) {
  if (number < min || number > max) {
    throw ConfigError(fmt::format("{}: {} is outside [{}, {}]", where, number, min, max));
  }
  return number;
}

inline uint64_t json_uint(element value, const std::string& where, uint64_t min, uint64_t max) {
  uint64_t number = 0;
  if (value.get_uint64().get(number) != simdjson::SUCCESS) {
    throw ConfigError(fmt::format("{}: expected an unsigned integer", where));
  }
  return checked(number, where, min, max);
}

inline uint64_t text_uint(std::string_view text, const std::string& where, uint64_t min,
                          uint64_t max) {
  uint64_t number = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw ConfigError(fmt::format("{}: '{}' is not an unsigned integer", where, text));
  }
  return checked(number, where, min, max);
}

inline bool json_bool(element value, const std::string& where) {
  bool flag = false;
  if (value.get_bool().get(flag) != simdjson::SUCCESS) {
    throw ConfigError(fmt::format("{}: expected true or false", where));
  }
  return flag;
}

inline bool text_bool(std::string_view text, const std::string& where) {
  if (text == "true") return true;
  if (text == "false") return false;
  throw ConfigError(fmt::format("{}: '{}' is not true or false", where, text));
}

inline double checked_fraction(double number, const std::string& where, double min, double max) {
  if (!(number >= min && number <= max)) {
    throw ConfigError(fmt::format("{}: {} is outside [{}, {}]", where, number, min, max));
  }
  return number;
}

// ----- builders -----

// A field reached from the config: `get` is a generic lambda, `[](auto& c) -> auto& {...}`, so
// one accessor serves reading (non-const) and showing (const).
template <typename Get>
using FieldOf = std::remove_cvref_t<decltype(std::declval<Get>()(std::declval<ServerConfig&>()))>;

inline Setting base(std::string key, std::string flag, std::string value, std::string help) {
  Setting s;
  s.key = std::move(key);
  s.flag = std::move(flag);
  s.value = std::move(value);
  s.help = std::move(help);
  return s;
}

// An unsigned number in [min, max], stored through `store` and shown through `load` (for fields
// kept in other units: milliseconds, bytes for mebibytes, a double).
template <typename Store, typename Load>
inline Setting number(std::string key, std::string flag, uint64_t min, uint64_t max,
                      std::string help, Store store, Load load) {
  Setting s =
      base(std::move(key), std::move(flag), fmt::format("{}..{}", min, max), std::move(help));
  s.read_json = [=](ServerConfig& c, element v, const std::string& where) {
    store(c, json_uint(v, where, min, max));
  };
  s.read_text = [=](ServerConfig& c, std::string_view t, const std::string& where) {
    store(c, text_uint(t, where, min, max));
  };
  s.show = [=](const ServerConfig& c) { return std::to_string(load(c)); };
  return s;
}

// An integer field.
template <typename Get>
inline Setting uint_setting(std::string key, uint64_t min, uint64_t max, std::string help, Get get,
                            std::string flag = {}) {
  using Field = FieldOf<Get>;
  return number(
      std::move(key), std::move(flag), min, max, std::move(help),
      [get](ServerConfig& c, uint64_t n) { get(c) = static_cast<Field>(n); },
      [get](const ServerConfig& c) { return static_cast<uint64_t>(get(c)); });
}

// A std::chrono::milliseconds field, written `..._ms` in the config.
template <typename Get>
inline Setting ms_setting(std::string key, uint64_t min, uint64_t max, std::string help, Get get) {
  return number(
      std::move(key), {}, min, max, std::move(help),
      [get](ServerConfig& c, uint64_t n) { get(c) = milliseconds(n); },
      [get](const ServerConfig& c) { return static_cast<uint64_t>(get(c).count()); });
}

template <typename Get>
inline Setting bool_setting(std::string key, std::string help, Get get) {
  Setting s = base(std::move(key), {}, "true|false", std::move(help));
  s.read_json = [get](ServerConfig& c, element v, const std::string& where) {
    get(c) = json_bool(v, where);
  };
  s.read_text = [get](ServerConfig& c, std::string_view t, const std::string& where) {
    get(c) = text_bool(t, where);
  };
  s.show = [get](const ServerConfig& c) { return std::string(get(c) ? "true" : "false"); };
  return s;
}

// A string (or path) field; `check` may refuse a value (throws ConfigError).
template <typename Get, typename Check>
inline Setting text_setting(std::string key, std::string help, Get get, std::string flag,
                            Check check) {
  Setting s = base(std::move(key), std::move(flag), "text", std::move(help));
  s.read_text = [get, check](ServerConfig& c, std::string_view t, const std::string& where) {
    check(t, where);
    get(c) = std::string(t);
  };
  s.read_json = [read = s.read_text](ServerConfig& c, element v, const std::string& where) {
    read(c, json_string(v, where), where);
  };
  s.show = [get](const ServerConfig& c) {
    const auto& v = get(c);
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(v)>, std::filesystem::path>) {
      return v.empty() ? std::string("\"\"") : v.string();
    } else {
      return v.empty() ? std::string("\"\"") : std::string(v);
    }
  };
  return s;
}

template <typename Get>
inline Setting text_setting(std::string key, std::string help, Get get, std::string flag = {}) {
  return text_setting(std::move(key), std::move(help), get, std::move(flag),
                      [](std::string_view, const std::string&) {});
}

// One of a closed set of names.
template <typename Get>
inline Setting enum_setting(std::string key,
                            std::vector<std::pair<std::string, FieldOf<Get>>> names,
                            std::string help, Get get, std::string flag = {}) {
  std::string list, value;
  for (const auto& [name, e] : names) {
    list += (list.empty() ? "" : ", ") + name;
    value += (value.empty() ? "" : "|") + name;
  }
  Setting s = base(std::move(key), std::move(flag), value, std::move(help));
  s.read_text = [=](ServerConfig& c, std::string_view t, const std::string& where) {
    for (const auto& [name, e] : names) {
      if (t == name) {
        get(c) = e;
        return;
      }
    }
    throw ConfigError(fmt::format("{}: '{}' is not one of {}", where, t, list));
  };
  s.read_json = [read = s.read_text](ServerConfig& c, element v, const std::string& where) {
    read(c, json_string(v, where), where);
  };
  s.show = [=](const ServerConfig& c) {
    for (const auto& [name, e] : names) {
      if (get(c) == e) return name;
    }
    return std::string("?");
  };
  return s;
}

// A double in [min, max] (a share of something).
template <typename Get>
inline Setting fraction_setting(std::string key, double min, double max, std::string help,
                                Get get) {
  Setting s = base(std::move(key), {}, fmt::format("{}..{}", min, max), std::move(help));
  s.read_json = [=](ServerConfig& c, element v, const std::string& where) {
    double value = 0;
    if (v.get_double().get(value) != simdjson::SUCCESS)
      throw ConfigError(fmt::format("{}: expected a number", where));
    get(c) = checked_fraction(value, where, min, max);
  };
  s.read_text = [=](ServerConfig& c, std::string_view t, const std::string& where) {
    double value = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
    if (ec != std::errc() || end != t.data() + t.size()) {
      throw ConfigError(fmt::format("{}: '{}' is not a number", where, t));
    }
    get(c) = checked_fraction(value, where, min, max);
  };
  s.show = [get](const ServerConfig& c) { return fmt::format("{}", get(c)); };
  return s;
}

// ----- the objects read whole -----

// vLLM's speculative_config: "method", "num_speculative_tokens", "prompt_lookup_min",
// "prompt_lookup_max" (unset lookup bounds: 5 and 5, or the one that is set),
// "disable_by_batch_size" (0: never; unset: the built-in default). The object is read whole
// each time: a later config file replaces it, never half of it — so it names its method (the
// built-in object, ngram, applies only when there is no "speculative" at all).
inline scheduler::SpeculativeConfig read_speculative(element value) {
  simdjson::dom::object object;
  if (value.get_object().get(object) != simdjson::SUCCESS)
    throw ConfigError("speculative: expected an object");
  scheduler::SpeculativeConfig read;
  read.disable_by_batch_size = ServerConfig{}.scheduler.speculative.disable_by_batch_size;
  std::optional<int32_t> min_n, max_n;
  bool has_method = false, has_k = false;
  for (auto [key, field] : object) {
    const std::string where = "speculative." + std::string(key);
    if (key == "method") {
      const std::string text = json_string(field, where);
      const auto method = scheduler::parse_speculative_method(text);
      if (!method)
        throw ConfigError(fmt::format("{}: \"{}\" is not \"none\" or \"ngram\"", where, text));
      read.method = *method;
      has_method = true;
    } else if (key == "num_speculative_tokens") {
      read.num_speculative_tokens =
          static_cast<int32_t>(json_uint(field, where, 1, scheduler::kMaxSpeculativeTokens));
      has_k = true;
    } else if (key == "prompt_lookup_min") {
      min_n = static_cast<int32_t>(json_uint(field, where, 1, 1024));
    } else if (key == "prompt_lookup_max") {
      max_n = static_cast<int32_t>(json_uint(field, where, 1, 1024));
    } else if (key == "disable_by_batch_size") {
      read.disable_by_batch_size = static_cast<int32_t>(json_uint(field, where, 0, 1 << 20));
    } else {
      throw ConfigError(fmt::format("{}: unknown config key", where));
    }
  }
  if (!has_method) throw ConfigError("speculative.method: required (\"ngram\" or \"none\")");
  if (read.method == scheduler::SpeculativeMethod::kNgram && !has_k) {
    throw ConfigError("speculative.num_speculative_tokens: required with method \"ngram\"");
  }
  read.prompt_lookup_min = min_n.value_or(max_n.value_or(5));
  read.prompt_lookup_max = max_n.value_or(min_n.value_or(5));
  if (read.prompt_lookup_max < read.prompt_lookup_min) {
    throw ConfigError(fmt::format("speculative.prompt_lookup_max: {} is below prompt_lookup_min {}",
                                  read.prompt_lookup_max, read.prompt_lookup_min));
  }
  return read;
}

inline Setting speculative_setting() {
  Setting s =
      base("speculative", {}, "object",
           "[speculative decoding](#speculative-decoding-n-gram-drafts) (vLLM's "
           "`speculative_config`): `method` `ngram` (prompt-lookup drafts) or `none`; "
           "`num_speculative_tokens` drafts per step at most (1..16, required with "
           "`ngram`); `prompt_lookup_min`/`_max` n-gram lengths (an object that sets "
           "neither: vLLM's 5/5; one set: both take it); `disable_by_batch_size` no drafts "
           "past this many decoding sequences (0: never). The object replaces the default "
           "whole, so it names its `method`. CPU backend only (CUDA decodes without drafts)");
  s.read_json = [](ServerConfig& c, element v, const std::string&) {
    c.scheduler.speculative = read_speculative(v);
  };
  s.show = [](const ServerConfig& c) {
    const scheduler::SpeculativeConfig& k = c.scheduler.speculative;
    if (!k.enabled()) return std::string(R"({"method": "none"})");
    return fmt::format(
        R"({{"method": "{}", "num_speculative_tokens": {}, "prompt_lookup_min": {}, )"
        R"("prompt_lookup_max": {}, "disable_by_batch_size": {}}})",
        scheduler::to_string(k.method), k.num_speculative_tokens, k.prompt_lookup_min,
        k.prompt_lookup_max, k.disable_by_batch_size);
  };
  return s;
}

inline Setting prefill_urls_setting() {
  Setting s = base("disagg.prefill_urls", "--prefill-url", "host:port",
                   "decode role: prefill servers long prompts go to (`host:port` or "
                   "`http://host:port`; the flag is repeatable)");
  s.repeatable = true;
  s.read_json = [](ServerConfig& c, element v, const std::string& where) {
    simdjson::dom::array urls;
    if (v.get(urls) != simdjson::SUCCESS)
      throw ConfigError(where + ": expected an array of strings");
    c.disagg.prefill_peers.clear();
    for (element url : urls)
      c.disagg.prefill_peers.push_back(parse_peer_url(json_string(url, where), where));
  };
  s.read_text = [](ServerConfig& c, std::string_view t, const std::string& where) {
    c.disagg.prefill_peers.push_back(parse_peer_url(t, where));
  };
  s.clear = [](ServerConfig& c) { c.disagg.prefill_peers.clear(); };
  s.show = [](const ServerConfig& c) {
    std::string list;
    for (const disagg::PeerAddress& p : c.disagg.prefill_peers)
      list += (list.empty() ? "" : ", ") + p.to_string();
    return "[" + list + "]";
  };
  return s;
}

}  // namespace troupe::app::setting_builders

namespace troupe::app {

// The whole list, section by section (settings_list.cpp); settings() keeps one copy.
std::vector<Setting> build_settings();

}  // namespace troupe::app
