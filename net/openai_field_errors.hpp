// What the OpenAI request readers (openai_request.cpp, openai_structured_output.cpp,
// openai_embeddings.cpp) share: the 400 that names a field, the 404 of an unknown model, and
// reading a field where an absent one and an explicit `null` are alike (OpenAI clients send
// nulls for unset options).
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <simdjson.h>

#include "net/http_types.hpp"

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
