#pragma once
// Field descriptions: a configuration struct says once what each of its fields is (its name,
// the member, the rule its value obeys, a one-line meaning), and everything that used to
// restate the fields is generated from that one place: validate() (here), the driver's
// schema, `heterograd-run --schema` and the docs' parameter tables (in tools/).
//
// A described struct S has
//   static constexpr auto description() { return heterograd::describe("S", field(...), ...); }
// Defaults are not restated: they are the member initialisers, read from a value-initialised
// S (or from any other value, e.g. an optimizer's own defaults). Nothing here knows JSON.
//
// An enumeration's names are one table next to the enumeration (`choice<E> names[]`); a field
// lists the table, or the part of it the struct accepts (std::span(names).first(2)). A list
// (std::vector of numbers) has one rule for every element, named `field[i]` in errors.
//
// Rules are the words of core/error.hpp's require(), so a generated check throws exactly
//   heterograd: invalid argument 'adam.beta1' = 1: must be in [0, 1)

#include <concepts>
#include <cmath>
#include <cstddef>
#include <limits>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/core/error.hpp"

namespace heterograd {

/// The values a number may take: an interval, closed or open at either end (an infinite end
/// is no bound), optionally finite, with a note appended to the rule ("(R = 0 would ...)").
struct bounds {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;
  bool finite = false;  ///< NaN and infinities refused (implied when both ends are bounded)
  std::string_view note = {};

  constexpr bool has_lo() const { return lo > -std::numeric_limits<double>::infinity(); }
  constexpr bool has_hi() const { return hi < std::numeric_limits<double>::infinity(); }
  constexpr bool unbounded() const { return !has_lo() && !has_hi() && !finite; }

  /// Whether x obeys the bounds (NaN never does, unless there are no bounds at all).
  constexpr bool admits(double x) const {
    if (unbounded()) return true;
    if (x != x) return false;
    if ((finite || (has_lo() && has_hi())) &&
        (x == std::numeric_limits<double>::infinity() ||
         x == -std::numeric_limits<double>::infinity()))
      return false;
    if (has_lo() && (lo_open ? !(x > lo) : !(x >= lo))) return false;
    if (has_hi() && (hi_open ? !(x < hi) : !(x <= hi))) return false;
    return true;
  }

  /// The rule in require()'s words: "must be in [0, 1)", "must be finite and >= 0", ...
  std::string rule() const {
    std::ostringstream os;
    os.precision(15);  // 2^30 as 1073741824, 0.1 as 0.1
    if (has_lo() && has_hi()) {
      os << "must be in " << (lo_open ? '(' : '[') << lo << ", " << hi << (hi_open ? ')' : ']');
    } else if (has_lo() || has_hi()) {
      os << "must be " << (finite ? "finite and " : "");
      if (has_lo())
        os << (lo_open ? "> " : ">= ") << lo;
      else
        os << (hi_open ? "< " : "<= ") << hi;
    } else if (finite) {
      os << "must be finite";
    }
    if (!note.empty()) os << " " << note;
    return os.str();
  }
};

/// x >= lo.
constexpr bounds at_least(double lo) { return {.lo = lo}; }
/// x > lo.
constexpr bounds above(double lo) { return {.lo = lo, .lo_open = true}; }
/// Finite and x >= lo.
constexpr bounds finite_at_least(double lo) { return {.lo = lo, .finite = true}; }
/// Finite and x > lo.
constexpr bounds finite_above(double lo) { return {.lo = lo, .lo_open = true, .finite = true}; }
/// [lo, hi].
constexpr bounds closed(double lo, double hi) { return {.lo = lo, .hi = hi}; }
/// [lo, hi).
constexpr bounds closed_open(double lo, double hi) { return {.lo = lo, .hi = hi, .hi_open = true}; }
/// (lo, hi].
constexpr bounds open_closed(double lo, double hi) { return {.lo = lo, .hi = hi, .lo_open = true}; }
/// The same bounds with a note appended to the rule.
constexpr bounds with_note(bounds b, std::string_view note) {
  b.note = note;
  return b;
}

/// One allowed value of an enumeration field and its name (what configurations write).
template <class E>
struct choice {
  std::string_view name;
  E value;
};

/// The name of v in a table of choices (empty when v is not in it).
template <class E>
constexpr std::string_view name_of(std::span<const choice<E>> table, E v) {
  for (const auto& c : table)
    if (c.value == v) return c.name;
  return {};
}
template <class E, std::size_t N>
constexpr std::string_view name_of(const choice<E> (&table)[N], E v) {
  return name_of(std::span<const choice<E>>(table), v);
}

/// The value named `name` in a table of choices (nullptr when no entry has that name).
template <class E>
constexpr const E* value_of(std::span<const choice<E>> table, std::string_view name) {
  for (const auto& c : table)
    if (c.name == name) return &c.value;
  return nullptr;
}
template <class E, std::size_t N>
constexpr const E* value_of(const choice<E> (&table)[N], std::string_view name) {
  return value_of(std::span<const choice<E>>(table), name);
}

/// The rule of an enumeration's table: "must be one of discard, interrupt".
template <class E>
std::string choices_rule(std::span<const choice<E>> table) {
  std::string r = "must be one of ";
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (i) r += ", ";
    r += table[i].name;
  }
  return r;
}
template <class E, std::size_t N>
std::string choices_rule(const choice<E> (&table)[N]) {
  return choices_rule(std::span<const choice<E>>(table));
}

/// A list of numbers (a per-worker count): its elements obey the field's range.
template <class M>
struct list_traits : std::false_type {};
template <class T, class A>
  requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
struct list_traits<std::vector<T, A>> : std::true_type {
  using element_type = T;
};
template <class M>
concept number_list = list_traits<M>::value;

/// Whether a member validates itself (a learning-rate schedule: `validate(field name)`).
template <class M>
concept self_validating = requires(const M& m, std::string_view f) { m.validate(f); };

/// A member's kind, as a schema names it.
enum class field_kind { boolean, integer, number, choice, list, other };

template <class M>
constexpr field_kind kind_of() {
  if constexpr (std::is_same_v<M, bool>)
    return field_kind::boolean;
  else if constexpr (std::is_enum_v<M>)
    return field_kind::choice;
  else if constexpr (std::is_integral_v<M>)
    return field_kind::integer;
  else if constexpr (std::is_floating_point_v<M>)
    return field_kind::number;
  else if constexpr (number_list<M>)
    return field_kind::list;
  else
    return field_kind::other;
}

/// One field of S: its name, the member, its meaning and its rule. Enumerations list their
/// allowed values (`choices`); numbers, integers and the elements of a list have `range`; any
/// other member either validates itself (self_validating: it is given the field's full name),
/// describes its own fields (checked as `field.subfield`) or has no rule.
template <class S, class M>
struct field {
  using struct_type = S;
  using member_type = M;
  static constexpr field_kind kind = kind_of<M>();

  std::string_view name;
  M S::*member;
  std::string_view meaning;
  bounds range = {};
  std::span<const choice<M>> choices = {};

  constexpr const M& of(const S& s) const { return s.*member; }
  constexpr M& of(S& s) const { return s.*member; }

  /// The name of an enumeration value (empty when it is not one of the choices).
  constexpr std::string_view name_of(M v) const
    requires std::is_enum_v<M>
  {
    return heterograd::name_of(choices, v);
  }

  /// Throws require()'s std::invalid_argument naming `prefix.name` unless s's value obeys
  /// the rule.
  void check(const S& s, std::string_view prefix) const {
    const M& v = s.*member;
    std::string full(prefix);
    if (!full.empty()) full += '.';
    full += name;
    if constexpr (std::is_enum_v<M>) {
      require(!name_of(v).empty(), full, static_cast<long long>(v), choices_rule());
    } else if constexpr (std::is_arithmetic_v<M> && !std::is_same_v<M, bool>) {
      require(range.admits(static_cast<double>(v)), full, v, range.rule());
    } else if constexpr (number_list<M>) {
      for (std::size_t i = 0; i < v.size(); ++i)
        require(range.admits(static_cast<double>(v[i])), full + "[" + std::to_string(i) + "]", v[i],
                range.rule());
    } else if constexpr (self_validating<M>) {
      v.validate(full);
    } else if constexpr (requires { M::description(); }) {
      M::description().for_each([&](const auto& f) { f.check(v, full); });
    }
  }

  /// "must be one of discard, interrupt".
  std::string choices_rule() const { return heterograd::choices_rule(choices); }
};

/// A field of S (types deduced from the member pointer).
template <class S, class M>
constexpr field<S, M> describe_field(std::string_view name, M S::*member, std::string_view meaning,
                                     bounds range = {}) {
  return {name, member, meaning, range, {}};
}
/// An enumeration field of S with its allowed values.
template <class S, class M, std::size_t N>
constexpr field<S, M> describe_field(std::string_view name, M S::*member, std::string_view meaning,
                                     const choice<M> (&choices)[N]) {
  return {name, member, meaning, {}, std::span<const choice<M>>(choices)};
}
/// An enumeration field of S that accepts part of its enumeration's table.
template <class S, class M>
constexpr field<S, M> describe_field(std::string_view name, M S::*member, std::string_view meaning,
                                     std::type_identity_t<std::span<const choice<M>>> choices)
  requires std::is_enum_v<M>
{
  return {name, member, meaning, {}, choices};
}

/// The description of a struct: its name (the prefix of its errors) and its fields in order.
template <class... Fields>
struct description {
  std::string_view name;
  std::tuple<Fields...> fields;

  /// Calls f(field) for each field, in order.
  template <class F>
  constexpr void for_each(F&& f) const {
    std::apply([&](const auto&... x) { (f(x), ...); }, fields);
  }
  static constexpr std::size_t size() { return sizeof...(Fields); }
};

template <class... Fields>
constexpr description<Fields...> describe(std::string_view name, Fields... fields) {
  return {name, std::tuple<Fields...>(fields...)};
}

/// A struct that describes its fields.
template <class S>
concept described = requires { S::description(); };

/// Checks every described field of s in order; the first broken rule throws require()'s
/// std::invalid_argument naming `prefix.field` (prefix: the description's name unless given).
template <described S>
void validate_fields(const S& s, std::string_view prefix) {
  S::description().for_each([&](const auto& f) { f.check(s, prefix); });
}
template <described S>
void validate_fields(const S& s) {
  validate_fields(s, S::description().name);
}

}  // namespace heterograd
