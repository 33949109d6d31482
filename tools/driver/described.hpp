#pragma once
// A described configuration struct (core/describe.hpp) read from a resolved JSON object: each
// field the object holds replaces the default given. The schema (config.cpp) made the object
// from the same description, so every value here has the field's type and obeys its rule;
// the library still validates the struct when it is used.

#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "config.hpp"
#include "heterograd/core/describe.hpp"
#include "schema.hpp"

namespace hgrun {

/// `defaults` with each described field that `o` holds set from it: under the field's name,
/// or the key `renamed` gives it ((field, key) pairs); a described member struct's fields under
/// `<member>_<field>` (schema.hpp). An unsigned count may be the string "inf"
/// (schema::count_or_inf): its largest value, the library's "no bound".
template <heterograd::described S>
void read_fields(const json& o, S& into, const std::string& prefix,
                 const std::vector<std::pair<std::string, std::string>>& renamed) {
  S::description().for_each([&](const auto& f) {
    using M = typename std::remove_cvref_t<decltype(f)>::member_type;
    std::string key = prefix + std::string(f.name);
    if constexpr (schema::nested_fields<M>) {
      read_fields(o, f.of(into), key + "_", renamed);
    } else {
      for (const auto& [field, to] : renamed)
        if (field == key) key = to;
      if (!o.contains(key)) return;
      const json& v = o.at(key);
      if constexpr (std::is_integral_v<M> && std::is_unsigned_v<M> && !std::is_same_v<M, bool>) {
        if (v.is_string() && v.get<std::string>() == "inf") {
          f.of(into) = std::numeric_limits<M>::max();
          return;
        }
      }
      if constexpr (std::is_enum_v<M>) {
        for (const auto& c : f.choices)
          if (v.get<std::string>() == c.name) f.of(into) = c.value;
      } else if constexpr (std::is_arithmetic_v<M> || heterograd::number_list<M>) {
        f.of(into) = v.get<M>();
      } else {
        throw std::logic_error("from_json: field '" + key + "' has no JSON form");
      }
    }
  });
}
template <heterograd::described S>
S from_json(const json& o, S defaults,
            const std::vector<std::pair<std::string, std::string>>& renamed = {}) {
  read_fields(o, defaults, "", renamed);
  return defaults;
}

/// Copies every field of `from` into the field at the same position of `to`: two
/// instantiations of one described struct template (a number and a schedule for the
/// learning rate), whose descriptions list the same fields in the same order.
template <heterograd::described A, heterograd::described B>
void copy_fields(const A& from, B& to) {
  constexpr auto da = A::description();
  constexpr auto db = B::description();
  static_assert(da.size() == db.size(), "copy_fields: the descriptions differ");
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((to.*(std::get<I>(db.fields).member) = from.*(std::get<I>(da.fields).member)), ...);
  }
  (std::make_index_sequence<da.size()>{});
}

}  // namespace hgrun
