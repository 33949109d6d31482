// heterograd-run's configuration checker: a document against the schema (kinds, ranges,
// choices, required and unknown keys, text without control characters, keys that apply only
// under conditions), and the JSON parser that limits depth and refuses duplicate keys.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "config_detail.hpp"
#include "schema.hpp"

namespace hgrun {
namespace {
using namespace schema;
}  // namespace

namespace config_detail {

std::string fmt(double x) {
  if (std::fabs(x) < 1e15 && x == std::nearbyint(x)) return std::to_string(static_cast<long long>(x));
  std::ostringstream os;
  os << x;
  return os.str();
}


std::string range_text(const spec& s) {
  const bool has_lo = std::isfinite(s.lo), has_hi = std::isfinite(s.hi);
  // The default upper bound of integers keeps counts exact in a double; say it, since values
  // above it are refused.
  if (has_lo && has_hi && s.k == kind::integer && s.hi >= max_config_integer) return " in [" + fmt(s.lo) + ", 1e15]";
  if (has_lo && has_hi)
    return std::string(" in ") + (s.lo_open ? "(" : "[") + fmt(s.lo) + ", " + fmt(s.hi) +
           (s.hi_open ? ")" : "]");
  if (has_lo) return (s.lo_open ? " > " : " >= ") + fmt(s.lo);
  if (has_hi) return (s.hi_open ? " < " : " <= ") + fmt(s.hi);
  return "";
}

std::string expected(const spec& s) {
  switch (s.k) {
    case kind::integer: return "an integer" + range_text(s);
    case kind::number: return "a number" + range_text(s);
    case kind::boolean: return "true or false";
    case kind::string: return "a string";
    case kind::count_or_inf: return "an integer >= " + fmt(s.lo) + " or the string \"inf\"";
    case kind::choice: {
      std::string o = "one of ";
      for (std::size_t i = 0; i < s.choices.size(); ++i)
        o += (i ? ", \"" : "\"") + s.choices[i] + "\"";
      return o;
    }
    case kind::object: {
      if (s.free_form) return "an object";
      std::string o = "an object with keys ";
      for (std::size_t i = 0; i < s.fields.size(); ++i) o += (i ? ", " : "") + s.fields[i].first;
      return o;
    }
    case kind::array:
      return "an array" + (s.min_items ? " of at least " + std::to_string(s.min_items) : std::string()) +
             (s.unique_items ? " of distinct items" : "") + " of " + expected(*s.item);
  }
  return "?";
}


std::string shown(const json& v) {
  // replace: invalid UTF-8 in user strings must not turn into a json::type_error.
  std::string t = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (t.size() > 60) t = t.substr(0, 57) + "...";
  return t;
}


[[noreturn]] void fail(const std::string& path, const spec& s, const json& v) {
  throw config_error(path, "expected " + expected(s) + ", got " + shown(v));
}

// Free text reaches file names, CSV/JSON files, the charts, the Markdown table and the
// terminal: a newline there can break a CSV row or a table line, an escape sequence
// can rewrite the terminal. Every string of the schema is refused with a control character.
void check_text(const std::string& path, const std::string& text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof code, "0x%02x", c);
      throw config_error(path, std::string("expected text without control characters, got byte ") + code +
                                   " at offset " + std::to_string(i) + " of " + shown(json(text)));
    }
  }
  try {
    (void)json(text).dump();  // strict: throws on invalid UTF-8 (--set takes raw bytes)
  } catch (const json::type_error&) {
    throw config_error(path, "expected UTF-8 text, got " + shown(json(text)));
  }
}

// A key as it appears in a key path: as is when it is a plain word, else quoted and escaped
// (it is user text, printed to the terminal).
std::string key_text(const std::string& k) {
  const bool plain = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
  if (plain) return k;
  std::string q = json(k).dump(-1, ' ', false, json::error_handler_t::replace);
  if (q.size() > 60) q = q.substr(0, 57) + "...";
  return q;
}

bool in_range(const spec& s, double x) {
  if (std::isnan(x)) return false;
  if (s.lo_open ? !(x > s.lo) : !(x >= s.lo)) return false;
  if (s.hi_open ? !(x < s.hi) : !(x <= s.hi)) return false;
  return true;
}

json check(const spec& s, const json& v, const std::string& path);

json check_object(const spec& s, const json& v, const std::string& path) {
  if (!v.is_object()) fail(path, s, v);
  if (s.free_form) return v;
  std::set<std::string> known;
  for (const auto& [k, f] : s.fields) known.insert(k);
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!known.count(it.key())) {
      std::string keys;
      for (const auto& [k, f] : s.fields) keys += (keys.empty() ? "" : ", ") + k;
      const std::string key = key_text(it.key());
      throw config_error(path.empty() ? key : path + "." + key,
                         "unknown key; expected one of: " + keys);
    }
  }
  json out = json::object();
  for (const auto& [k, f] : s.fields) {
    const std::string p = path.empty() ? k : path + "." + k;
    if (v.contains(k)) {
      out[k] = check(f, v.at(k), p);
    } else if (f.required) {
      throw config_error(p, "missing; expected " + expected(f));
    } else if (f.k == kind::object) {
      out[k] = check(f, json::object(), p);
    } else if (!f.def.is_null()) {
      out[k] = f.def;
    }
  }
  return out;
}

json check(const spec& s, const json& v, const std::string& path) {
  switch (s.k) {
    case kind::integer: {
      if (!v.is_number_integer() && !(v.is_number_float() && std::nearbyint(v.get<double>()) == v.get<double>()))
        fail(path, s, v);
      const double x = v.get<double>();
      if (!in_range(s, x)) fail(path, s, v);
      return v.is_number_unsigned() ? json(v.get<std::uint64_t>()) : json(static_cast<std::int64_t>(x));
    }
    case kind::number: {
      // An infinity (a program's document; JSON text cannot hold one) would make every bound
      // of the run infinite, and config.json would write it as null.
      if (!v.is_number() || !std::isfinite(v.get<double>())) fail(path, s, v);
      if (!in_range(s, v.get<double>())) fail(path, s, v);
      return v;
    }
    case kind::count_or_inf: {
      if (v.is_string() && v.get<std::string>() == "inf") return v;
      if (!v.is_number_integer() || v.get<double>() < s.lo) fail(path, s, v);
      return v;
    }
    case kind::boolean:
      if (!v.is_boolean()) fail(path, s, v);
      return v;
    case kind::string:
      if (!v.is_string()) fail(path, s, v);
      check_text(path, v.get<std::string>());
      return v;
    case kind::choice:
      if (!v.is_string() ||
          std::find(s.choices.begin(), s.choices.end(), v.get<std::string>()) == s.choices.end())
        fail(path, s, v);
      return v;
    case kind::object: return check_object(s, v, path);
    case kind::array: {
      if (!v.is_array() || v.size() < s.min_items) fail(path, s, v);
      json out = json::array();
      std::map<json, std::size_t> first;  // an item's value -> its first index (unique_items)
      for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string p = path + "[" + std::to_string(i) + "]";
        out.push_back(check(*s.item, v[i], p));
        if (!s.unique_items) continue;
        if (const auto [it, fresh] = first.emplace(out.back(), i); !fresh)
          throw config_error(p, "expected distinct items (each value once), got " + shown(v[i]) + " again (as " +
                                    path + "[" + std::to_string(it->second) + "])");
      }
      return out;
    }
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// Keys that apply (spec::applies): a key the document gives is refused where its conditions, or
// those of an object it is in, do not hold in the resolved document (a Fashion-MNIST run does
// not read data.noise_model); a key left out keeps its default, unread.

// The value at a dotted path from the root of `doc` (null when there is none).
const json& value_at(const json& doc, const std::string& key) {
  static const json none;
  const json* cur = &doc;
  for (std::size_t begin = 0; begin <= key.size();) {
    const auto end = std::min(key.find('.', begin), key.size());
    const std::string k = key.substr(begin, end - begin);
    if (!cur->is_object() || !cur->contains(k)) return none;
    cur = &(*cur)[k];
    begin = end + 1;
  }
  return *cur;
}

// "data.dataset is \"text\" and model.kind is one of \"mlp\", \"softmax\"".
std::string applies_text(const std::vector<condition>& all) {
  std::string t;
  for (const auto& c : all) {
    t += (t.empty() ? "" : " and ") + c.key + (c.values.size() == 1 ? " is " : " is one of ");
    for (std::size_t i = 0; i < c.values.size(); ++i) t += (i ? ", " : "") + c.values[i].dump();
  }
  return t;
}

// Checks the keys `given` holds (the document as written, below `path`) against `resolved`;
// `inherited`: the conditions of the objects above.
void check_applies(const spec& s, const json& given, const json& resolved, const std::string& path,
                   const std::vector<condition>& inherited) {
  if (s.k != kind::object || s.free_form || !given.is_object()) return;
  for (const auto& [k, f] : s.fields) {
    if (!given.contains(k)) continue;
    const std::string p = path.empty() ? k : path + "." + k;
    std::vector<condition> all = inherited;
    all.insert(all.end(), f.applies.begin(), f.applies.end());
    if (f.k == kind::object && !f.free_form) {
      check_applies(f, given[k], resolved, p, all);
      continue;
    }
    for (const auto& c : all) {
      const json& v = value_at(resolved, c.key);
      if (std::find(c.values.begin(), c.values.end(), v) == c.values.end())
        throw config_error(p, "not used with " + c.key + " " + shown(v) + ": the key applies when " +
                                  applies_text(all) + "; got " + shown(given[k]) + " (remove it)");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Parsing: nlohmann's own parser builds the document without recursion, but dump(), copies and
// the checks recurse, so the depth is limited here, while parsing; and it keeps the last of
// two equal keys silently, so keys are checked here too. A SAX handler builds the document
// and knows the key path of every value it is given.

class config_builder {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  explicit config_builder(std::string prefix) : prefix_(std::move(prefix)) {}

  bool null() { return add(json(nullptr)); }
  bool boolean(bool b) { return add(json(b)); }
  bool number_integer(number_integer_t x) { return add(json(x)); }
  bool number_unsigned(number_unsigned_t x) { return add(json(x)); }
  bool number_float(number_float_t x, const string_t&) { return add(json(x)); }
  bool string(string_t& t) { return add(json(std::move(t))); }
  bool binary(binary_t&) { return add(json(nullptr)); }  // not produced by JSON text
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(string_t& k) {
    json& obj = *stack_.back().node;
    if (obj.contains(k))
      throw config_error(path_here(k), "a duplicate key (the object has \"" + key_text(k) +
                                           "\" already; JSON keeps only one of them)");
    stack_.back().key = std::move(k);
    return true;
  }
  bool parse_error(std::size_t byte, const std::string&, const nlohmann::detail::exception& e) {
    error_ = e.what();
    error_byte_ = byte;
    error_path_ = stack_.empty() ? prefix_ : path_here(stack_.back().node->is_object() ? stack_.back().key : "");
    return false;
  }

  json& result() { return root_; }
  const std::string& error() const { return error_; }
  std::size_t error_byte() const { return error_byte_; }
  const std::string& error_path() const { return error_path_; }

 private:
  struct frame {
    json* node;
    std::string key;  // objects: the key of the value being read
  };
  // The key path of the value being read (`k`: its key in the innermost object).
  std::string path_here(const std::string& k) const {
    std::string p = prefix_;
    for (std::size_t i = 0; i < stack_.size(); ++i) {
      const json& n = *stack_[i].node;
      if (n.is_object()) {
        const std::string& key = i + 1 == stack_.size() ? k : stack_[i].key;
        if (!p.empty()) p += '.';  // appended piecewise: g++ 12's -Wrestrict false positive
        p += key_text(key);
      } else {
        // The innermost array's next element is being read; an outer one's last is open.
        p += '[';
        p += std::to_string(i + 1 == stack_.size() ? n.size() : n.size() - 1);
        p += ']';
      }
    }
    return p;
  }
  json* place(json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& top = *stack_.back().node;
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[stack_.back().key];
    slot = std::move(v);
    return &slot;
  }
  bool add(json v) {
    place(std::move(v));
    return true;
  }
  bool open(json v) {
    if (stack_.size() >= max_config_depth)
      throw config_error(path_here(stack_.empty() || !stack_.back().node->is_object() ? "" : stack_.back().key),
                         "nested deeper than " + std::to_string(max_config_depth) +
                             " levels of objects and arrays");
    json* n = place(std::move(v));
    stack_.push_back({n, {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  std::string prefix_;
  json root_;
  std::vector<frame> stack_;
  std::string error_, error_path_;
  std::size_t error_byte_ = 0;
};

// Parses `text`; nullopt when it is not JSON (then `why` says where), config_error when it is
// JSON that no configuration may hold (too deep, duplicate keys).
std::optional<json> parse_limited(std::string_view text, const std::string& prefix, std::string& why) {
  config_builder b(prefix);
  const bool ok = json::sax_parse(text, &b, json::input_format_t::json, /*strict=*/true,
                                  /*ignore_comments=*/true);
  if (!ok) {
    why = b.error();
    return std::nullopt;
  }
  return std::move(b.result());
}

}  // namespace config_detail
}  // namespace hgrun
