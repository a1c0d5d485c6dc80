#include "actors/messages/disagg_types.hpp"

#include "model/enum_names.hpp"

namespace troupe::disagg {

constexpr EnumNames<Role, 3> kRoleNames{{{
    {Role::kCombined, "combined"}, {Role::kPrefill, "prefill"}, {Role::kDecode, "decode"}}}, "combined"};
static_assert(kRoleNames.dense());

std::string_view to_string(Role role) { return kRoleNames.name(role); }

std::optional<Role> parse_role(std::string_view text) { return kRoleNames.parse(text); }

}  // namespace troupe::disagg
