#pragma once
// The schema language of heterograd-run's experiment files: each node knows its kind, range,
// choices, default and meaning. config.cpp checks documents against it and prints it
// (--schema); the algorithm registry (registry.hpp) gives each algorithm's keys in it, and
// described_fields() makes them from a described config struct (core/describe.hpp), so a
// library default or rule is never restated here.

#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "config.hpp"
#include "heterograd/core/describe.hpp"

namespace hgrun::schema {

// ---------------------------------------------------------------------------------------------
// A small schema language: each node knows its kind, range, choices, default and meaning.

enum class kind { integer, number, boolean, string, choice, object, array, count_or_inf };

/// A condition on the resolved document: the key at `key` (a dotted path from the root,
/// "model.kind") holds one of `values`.
struct condition {
  std::string key;
  std::vector<json> values;
};

struct spec {
  kind k = kind::number;
  std::string doc;
  json def;  // null: no default
  bool required = false;
  double lo = -std::numeric_limits<double>::infinity(),
         hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  std::vector<std::string> choices;
  std::vector<std::pair<std::string, spec>> fields;  // object
  std::shared_ptr<spec> item;                        // array
  std::size_t min_items = 0;
  std::size_t max_items = std::numeric_limits<std::size_t>::max();
  bool free_form = false;  // object: any keys (checked elsewhere)
  bool unique_items = false;  // array: no item twice
  // The key applies to a document when all of these hold (and its object's conditions do): a
  // document that gives it otherwise is refused, naming the key (config.cpp's check_applies).
  std::vector<condition> applies;
  // Out of line: `fields` holds specs, a complete type only after this brace (clang with
  // libstdc++ refuses vector<pair<string, spec>> members generated inside the class).
  spec();
  spec(const spec&);
  spec(spec&&) noexcept;
  spec& operator=(const spec&);
  spec& operator=(spec&&) noexcept;
  ~spec();
};
inline spec::spec() = default;
inline spec::spec(const spec&) = default;
inline spec::spec(spec&&) noexcept = default;
inline spec& spec::operator=(const spec&) = default;
inline spec& spec::operator=(spec&&) noexcept = default;
inline spec::~spec() = default;

inline spec integer(std::string doc, json def, double lo = 0, double hi = max_config_integer) {
  spec s;
  s.k = kind::integer;
  s.doc = std::move(doc);
  s.def = std::move(def);
  s.lo = lo;
  s.hi = hi;
  return s;
}
inline spec number(std::string doc, json def, double lo = -std::numeric_limits<double>::infinity(),
                   double hi = std::numeric_limits<double>::infinity(), bool lo_open = false,
                   bool hi_open = false) {
  spec s;
  s.k = kind::number;
  s.doc = std::move(doc);
  s.def = std::move(def);
  s.lo = lo;
  s.hi = hi;
  s.lo_open = lo_open;
  s.hi_open = hi_open;
  return s;
}
inline spec positive(std::string doc, json def) {
  return number(std::move(doc), std::move(def), 0, std::numeric_limits<double>::infinity(), true);
}
inline spec boolean(std::string doc, json def) {
  spec s;
  s.k = kind::boolean;
  s.doc = std::move(doc);
  s.def = std::move(def);
  return s;
}
inline spec string(std::string doc, json def) {
  spec s;
  s.k = kind::string;
  s.doc = std::move(doc);
  s.def = std::move(def);
  return s;
}
inline spec choice(std::string doc, json def, std::vector<std::string> options) {
  spec s;
  s.k = kind::choice;
  s.doc = std::move(doc);
  s.def = std::move(def);
  s.choices = std::move(options);
  return s;
}
inline spec object(std::string doc, std::vector<std::pair<std::string, spec>> fields) {
  spec s;
  s.k = kind::object;
  s.doc = std::move(doc);
  s.fields = std::move(fields);
  s.def = json::object();
  return s;
}
inline spec free_object(std::string doc) {
  spec s = object(std::move(doc), {});
  s.free_form = true;
  return s;
}
inline spec array(std::string doc, spec item, json def, std::size_t min_items = 0) {
  spec s;
  s.k = kind::array;
  s.doc = std::move(doc);
  s.item = std::make_shared<spec>(std::move(item));
  s.def = std::move(def);
  s.min_items = min_items;
  return s;
}
inline spec count_or_inf(std::string doc, json def, double lo) {
  spec s;
  s.k = kind::count_or_inf;
  s.doc = std::move(doc);
  s.def = std::move(def);
  s.lo = lo;
  return s;
}
inline spec required(spec s) {
  s.required = true;
  s.def = nullptr;
  return s;
}
inline spec optional(spec s) {  // absent means "not set" (no default written)
  s.def = nullptr;
  return s;
}
inline spec distinct(spec s) {  // an array whose items differ
  s.unique_items = true;
  return s;
}
/// `s`, applying only where every condition holds.
inline spec applies_when(spec s, std::vector<condition> c) {
  s.applies = std::move(c);
  return s;
}
/// The field `key` of `fields` applying only where every condition holds (a field made from
/// a description, whose spec is not written out here).
inline void set_applies(std::vector<std::pair<std::string, spec>>& fields, const std::string& key,
                        std::vector<condition> c) {
  for (auto& [k, s] : fields)
    if (k == key) {
      s.applies = std::move(c);
      return;
    }
  throw std::logic_error("schema: no field '" + key + "' to set a condition on");
}

// A member struct whose fields are keys of their own (`<member>_<field>`).
template <class M>
concept nested_fields = heterograd::described<M> && !heterograd::self_validating<M>;

// An integer field's bounds as the schema's closed ones (an unbounded end: [0, max_config_integer]).
inline std::pair<double, double> integer_bounds(const heterograd::bounds& r) {
  const double lo = !r.has_lo() ? 0 : r.lo_open ? std::floor(r.lo) + 1 : std::ceil(r.lo);
  const double hi = !r.has_hi() ? max_config_integer : r.hi_open ? std::ceil(r.hi) - 1 : std::floor(r.hi);
  return {lo, hi};
}

// A described struct's fields (core/describe.hpp) as schema nodes: the kind, the rule and the
// meaning from the description, the default from `d` (the struct's own initialisers, or an
// optimizer's own defaults). A list of numbers is an array whose items obey the field's rule;
// a described member struct's fields are keys `<member>_<field>` (local learning's pgl_period).
// Each key goes by the name `renamed` gives it ((key, new key) pairs); renamed to "", the field
// is not offered (the driver sets it itself). A field with no JSON form is not offered.
template <heterograd::described S>
inline void add_described_fields(const S& d, const std::string& prefix,
                                 const std::vector<std::pair<std::string, std::string>>& renamed,
                                 std::vector<std::pair<std::string, spec>>& out) {
  S::description().for_each([&](const auto& f) {
    using M = typename std::remove_cvref_t<decltype(f)>::member_type;
    const std::string doc(f.meaning);
    std::string key = prefix + std::string(f.name);
    spec s;
    if constexpr (std::is_same_v<M, bool>) {
      s = boolean(doc, f.of(d));
    } else if constexpr (std::is_enum_v<M>) {
      std::vector<std::string> names;
      for (const auto& c : f.choices) names.emplace_back(c.name);
      s = choice(doc, std::string(f.name_of(f.of(d))), std::move(names));
    } else if constexpr (std::is_integral_v<M>) {
      const auto [lo, hi] = integer_bounds(f.range);
      s = integer(doc, f.of(d), lo, hi);
    } else if constexpr (std::is_floating_point_v<M>) {
      s = number(doc, f.of(d), f.range.lo, f.range.hi, f.range.lo_open, f.range.hi_open);
    } else if constexpr (heterograd::number_list<M>) {
      using T = typename heterograd::list_traits<M>::element_type;
      spec item;
      if constexpr (std::is_integral_v<T>) {
        const auto [lo, hi] = integer_bounds(f.range);
        item = integer(doc, nullptr, lo, hi);
      } else {
        item = number(doc, nullptr, f.range.lo, f.range.hi, f.range.lo_open, f.range.hi_open);
      }
      s = array(doc, std::move(item), json(f.of(d)));
    } else if constexpr (nested_fields<M>) {
      add_described_fields(f.of(d), key + "_", renamed, out);
      return;
    } else {
      return;
    }
    for (const auto& [field, to] : renamed)
      if (field == key) key = to;
    if (!key.empty()) out.emplace_back(key, std::move(s));
  });
}
template <heterograd::described S>
inline std::vector<std::pair<std::string, spec>> described_fields(
    const S& d, const std::vector<std::pair<std::string, std::string>>& renamed = {}) {
  std::vector<std::pair<std::string, spec>> out;
  add_described_fields(d, "", renamed, out);
  return out;
}

}  // namespace hgrun::schema
