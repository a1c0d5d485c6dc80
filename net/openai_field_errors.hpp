// What the OpenAI request readers (openai_request.cpp, openai_structured_output.cpp,
// openai_embeddings.cpp) share: the 400 that names a field, the 404 of an unknown model, and
// reading a field where an absent one and an explicit `null` are alike (OpenAI clients send
// nulls for unset options).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <simdjson.h>

#include "net/http_types.hpp"
#include "net/json_input.hpp"

namespace troupe::net::openai_fields {

inline ApiError invalid(std::string param, std::string message, std::string code = "invalid_value") {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

inline ApiError bad_type(std::string_view param, std::string_view expected) {
  return invalid(std::string(param),
                 fmt::format("Invalid type for '{}': expected {}.", param, expected),
                 "invalid_type");
}

inline std::optional<simdjson::dom::element> field(simdjson::dom::object object,
                                                   std::string_view key) {
  simdjson::dom::element element;
  if (object[key].get(element) != simdjson::SUCCESS || element.is_null()) return std::nullopt;
  return element;
}

// An integer field's value; INT64_MAX for one past it (a range check then refuses it), nullopt
// for a non-integer.
inline std::optional<int64_t> as_integer(simdjson::dom::element e) {
  switch (e.type()) {
    case simdjson::dom::element_type::INT64: return int64_t(e);
    case simdjson::dom::element_type::UINT64: {
      const uint64_t v = uint64_t(e);
      return v > uint64_t(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                             : static_cast<int64_t>(v);
    }
    default: return std::nullopt;
  }
}

// A string field into `out` (absent or null: `out` unchanged).
inline std::optional<ApiError> read_string(simdjson::dom::object o, std::string_view key,
                                           std::string& out) {
  const auto e = field(o, key);
  if (!e) return std::nullopt;
  if (!e->is_string()) return bad_type(key, "a string");
  out = std::string(std::string_view(*e));
  return std::nullopt;
}

// Decoded strings must be UTF-8 too (a "\ud800" escape decodes to a lone surrogate).
inline std::optional<ApiError> check_text(std::string_view param, std::string_view text) {
  if (const auto bad = first_invalid_utf8(text)) {
    return invalid(std::string(param),
                   fmt::format("'{}' is not valid UTF-8 (invalid byte at offset {}).", param, *bad),
                   "invalid_utf8");
  }
  return std::nullopt;
}

// A request for a model other than the one served (an absent or empty name means it): 404, as
// OpenAI answers an unknown model. nullopt when the name is fine.
inline std::optional<ApiError> unknown_model(std::string_view model, std::string_view served_model_id) {
  if (model.empty() || model == served_model_id) return std::nullopt;
  ApiError e = invalid("model", fmt::format("The model '{}' does not exist.", model), "model_not_found");
  e.status = 404;
  e.type = "not_found_error";
  return e;
}

}  // namespace troupe::net::openai_fields
