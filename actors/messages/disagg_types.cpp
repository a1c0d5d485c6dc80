#include "actors/messages/disagg_types.hpp"

namespace troupe::disagg {

std::string_view to_string(Role role) {
  switch (role) {
    case Role::kCombined: return "combined";
    case Role::kPrefill: return "prefill";
    case Role::kDecode: return "decode";
  }
  return "combined";
}

std::optional<Role> parse_role(std::string_view text) {
  if (text == "combined") return Role::kCombined;
  if (text == "prefill") return Role::kPrefill;
  if (text == "decode") return Role::kDecode;
  return std::nullopt;
}

}  // namespace troupe::disagg
