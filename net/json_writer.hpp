// A small streaming JSON writer for responses (simdjson only parses). Always produces valid
// JSON text: strings are escaped, invalid UTF-8 becomes U+FFFD, non-finite numbers become null.
//
// Thread-safety: one writer per thread; it owns only its output string.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/json_string.hpp"

namespace troupe::net {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();

  // Inside an object: the next value's key.
  JsonWriter& key(std::string_view name);

  JsonWriter& value(std::string_view text);
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(const std::string& text) { return value(std::string_view(text)); }
  JsonWriter& value(bool flag);
  JsonWriter& value(int64_t number);
  JsonWriter& value(uint64_t number);
  JsonWriter& value(int number) { return value(static_cast<int64_t>(number)); }
  JsonWriter& value(unsigned number) { return value(static_cast<uint64_t>(number)); }
  JsonWriter& value(double number);
  JsonWriter& value(float number) { return value(static_cast<double>(number)); }
  JsonWriter& null();
  // Inserts already-serialised JSON as the next value (the caller vouches for it).
  JsonWriter& raw(std::string_view json);

  // key(name).value(v) in one call.
  template <typename T>
  JsonWriter& field(std::string_view name, const T& v) {
    key(name);
    return value(v);
  }

  const std::string& str() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void before_value();

  std::string out_;
  // One entry per open container: true once it holds an element (a comma is due).
  std::vector<bool> has_element_;
  bool after_key_ = false;
};

// Appends `text` to `out` as a quoted JSON string (invalid UTF-8 -> U+FFFD, DEL escaped).
using model::append_json_string;

}  // namespace troupe::net
