#pragma once
// The docs' parameter tables, generated from a described struct (core/describe.hpp): one row
// per field with its type, name, default (read from a value of the struct: its initialisers
// or another default set), rule and meaning. The docs tests generate each table and look for
// it, character for character, in its page; when a field, a default or a rule changes, the
// test prints the table to paste.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "heterograd/core/describe.hpp"

namespace hg_test {

inline std::string number_text(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  std::string s = b;
  // 1e-08 -> 1e-8: the exponent as people write it.
  const auto e = s.find("e-0");
  if (e != std::string::npos) s.erase(e + 2, 1);
  return s;
}

/// A field's value as the tables show it: numbers as %g, an enumeration by its name, a
/// schedule (a struct with a constant `value`) by that constant, a list as {} when empty.
template <class F, class M>
std::string value_text(const F& f, const M& v) {
  if constexpr (std::is_same_v<M, bool>)
    return v ? "true" : "false";
  else if constexpr (std::is_enum_v<M>)
    return std::string(f.name_of(v));
  else if constexpr (std::is_arithmetic_v<M>)
    return number_text(static_cast<double>(v));
  else if constexpr (requires { v.value; })
    return number_text(v.value);
  else if constexpr (heterograd::number_list<M>)
    return v.empty() ? "{}" : "...";
  else
    return "";
}

template <class M>
std::string type_text() {
  if constexpr (std::is_same_v<M, bool>)
    return "bool";
  else if constexpr (std::is_enum_v<M>)
    return "choice";
  else if constexpr (std::is_floating_point_v<M>)
    return "double";
  else if constexpr (std::is_integral_v<M>)
    return "integer";
  else if constexpr (requires(const M& m) { m.value; })
    return "schedule";
  else if constexpr (heterograd::number_list<M>)
    return "sizes";
  else
    return "struct";
}

/// The rule without "must be ": "finite and >= 0", "in [0, 1)", "one of fail, skip, zero".
template <class F>
std::string rule_text(const F& f) {
  using M = typename F::member_type;
  std::string r;
  if constexpr (std::is_enum_v<M>)
    r = f.choices_rule();
  else if constexpr (!std::is_same_v<M, bool>)
    r = f.range.rule();  // numbers, a list's elements, a schedule's values
  if (r.rfind("must be ", 0) == 0) r = r.substr(8);
  return r;
}

/// The Markdown table of S's description; `others` add "(name: value)" to a default that
/// differs from the first's (AdamW's weight decay).
template <class S>
std::string doc_table(const S& defaults, const std::vector<std::pair<std::string, S>>& others = {}) {
  std::string t = "| type | name | default | rule | meaning |\n|---|---|---|---|---|\n";
  S::description().for_each([&](const auto& f) {
    using M = typename std::remove_cvref_t<decltype(f)>::member_type;
    std::string d = value_text(f, f.of(defaults));
    for (const auto& [name, o] : others)
      if (value_text(f, f.of(o)) != value_text(f, f.of(defaults))) d += " (" + name + ": " + value_text(f, f.of(o)) + ")";
    std::string row = "|";
    for (const std::string& cell : {type_text<M>(), std::string(f.name), d, rule_text(f), std::string(f.meaning)})
      row += cell.empty() ? " |" : " " + cell + " |";
    t += row + "\n";
  });
  return t;
}

/// The text of a page.
inline std::string read_page(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace hg_test
