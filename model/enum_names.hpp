// EnumNames: one table per enum gives its names both ways, to text and back, so the two
// directions cannot drift apart (they were a switch each, written out 23 times across the tree).
// Header-only and constexpr: any thread; the tables are immutable constants.
//
//   constexpr EnumNames<Role, 3> kRoleNames{{{
//       {Role::kCombined, "combined"}, {Role::kPrefill, "prefill"}, {Role::kDecode, "decode"}}}};
//   static_assert(kRoleNames.dense());   // entries are the values 0, 1, 2 in order
//   kRoleNames.name(Role::kPrefill) == "prefill";  kRoleNames.parse("decode") == Role::kDecode
//
// Lives in model/ because that is the bottom layer (docs/design.md): every folder may include it.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

namespace troupe {

template <class E, std::size_t N>
  requires std::is_enum_v<E>
struct EnumNames {
  std::array<std::pair<E, std::string_view>, N> entries;
  // What name() says for a value outside the table (an out-of-range cast from bad data).
  std::string_view unknown = "unknown";

  constexpr std::string_view name(E value) const {
    for (const auto& [v, text] : entries) {
      if (v == value) return text;
    }
    return unknown;
  }

  constexpr std::optional<E> parse(std::string_view text) const {
    for (const auto& [v, name] : entries) {
      if (name == text) return v;
    }
    return std::nullopt;
  }

  // True when the entries list the values 0, 1, ..., N-1 in order: asserted beside each table of
  // a plain enumeration, so an enumerator inserted without a name breaks the build.
  constexpr bool dense() const {
    for (std::size_t i = 0; i < N; ++i) {
      if (static_cast<std::size_t>(static_cast<std::underlying_type_t<E>>(entries[i].first)) != i) return false;
    }
    return true;
  }
};

}  // namespace troupe
