// The schema of heterograd-run's experiment files, its checker and the override parser.
#include "config.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>

#include "files.hpp"
#include "heterograd/data/synthetic.hpp"
#include "heterograd/runtime/pacing.hpp"
#include "heterograd/runtime/placement.hpp"
#include "optimizer.hpp"
#include "registry.hpp"
#include "experiment.hpp"
#include "config_detail.hpp"
#include "schema.hpp"

#ifndef HG_INSTALL_EXPERIMENTS  // (tools/CMakeLists.txt sets it from GNUInstallDirs)
#define HG_INSTALL_EXPERIMENTS "share/heterograd/experiments"
#endif

namespace hgrun {

namespace {

using namespace schema;
using config_detail::fmt;
using config_detail::row_of;
using config_detail::shown;
constexpr double inf = std::numeric_limits<double>::infinity();

}  // namespace

std::string config_detail::fmt(double x) {
  if (std::fabs(x) < 1e15 && x == std::nearbyint(x)) return std::to_string(static_cast<long long>(x));
  std::ostringstream os;
  os << x;
  return os.str();
}

namespace {

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

}  // namespace

std::string config_detail::shown(const json& v) {
  // replace: invalid UTF-8 in user strings must not turn into a json::type_error.
  std::string t = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (t.size() > 60) t = t.substr(0, 57) + "...";
  return t;
}

namespace {

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

// ---------------------------------------------------------------------------------------------
// The schema.

// The optimizers (optimizer.hpp's list) and their keys: each kind's hyper-parameters with its
// own defaults. LAMB's tensor sizes are not a key: the buffer the driver steps is one tensor.
struct optimizer_kind {
  std::string name;
  std::vector<std::pair<std::string, spec>> fields;
};
const std::vector<optimizer_kind>& optimizer_kinds() {
  static const std::vector<optimizer_kind> v = [] {
    std::vector<optimizer_kind> out;
    for_each_optimizer_kind([&](std::string_view name, auto, const auto& defaults) {
      out.push_back({std::string(name), described_fields(defaults, {{"tensor_sizes", ""}})});
    });
    return out;
  }();
  return v;
}

const optimizer_kind* optimizer_kind_of(const std::string& name) {
  for (const auto& k : optimizer_kinds())
    if (k.name == name) return &k;
  return nullptr;
}

// The optimizer object as the checker sees it before the kind is known: `kind` and every key
// any optimizer has, with its rule (a key shared by several optimizers has one rule) and no
// default; resolve_optimizer() then keeps the kind's own keys and fills its defaults.
spec optimizer_spec() {
  std::vector<std::string> names;
  for (const auto& k : optimizer_kinds()) names.push_back(k.name);
  std::vector<std::pair<std::string, spec>> fields{
      {"kind", choice("optimizer (docs/optimizers.md); default sgd, a method's default the experiment's", nullptr,
                      names)}};
  for (const auto& k : optimizer_kinds())
    for (const auto& [key, f] : k.fields) {
      // (A loop over names: clang before 16 cannot capture a structured binding.)
      auto it = fields.begin();
      while (it != fields.end() && it->first != key) ++it;
      if (it == fields.end()) {
        spec u = f;
        u.def = nullptr;
        u.doc += " (" + k.name;
        fields.emplace_back(key, std::move(u));
      } else {
        if (expected(it->second) != expected(f))
          throw std::logic_error("config: optimizer key '" + key + "' has two rules");
        it->second.doc += ", " + k.name;
      }
    }
  for (auto& [key, f] : fields)
    if (key != "kind") f.doc += ")";
  return object("the optimizer (every worker's, or the server's for asynchronous methods): kind and its "
                "hyper-parameters",
                std::move(fields));
}

// The optimizer of kind `kind` from the keys given at this level (`own`, checked by
// optimizer_spec()) over those inherited (`inherited`: the experiment's, for a method): the
// kind's keys only, each own, else inherited, else the kind's default. An own key the kind
// does not have is an error; an inherited one is left behind (a method may change the kind).
json resolve_optimizer(const std::string& kind, const json& own, const json& inherited, const std::string& path) {
  const optimizer_kind* k = optimizer_kind_of(kind);
  if (!k) throw std::logic_error("config: an optimizer kind without keys");
  std::string keys = "kind";
  for (const auto& [key, f] : k->fields) keys += ", " + key;
  for (auto it = own.begin(); it != own.end(); ++it)
    if (it.key() != "kind" && std::none_of(k->fields.begin(), k->fields.end(),
                                           [&](const auto& f) { return f.first == it.key(); }))
      throw config_error(path + "." + it.key(), "unknown key for optimizer kind \"" + kind +
                                                    "\"; expected one of: " + keys);
  json out = {{"kind", kind}};
  for (const auto& [key, f] : k->fields)
    out[key] = own.contains(key) ? own[key] : inherited.contains(key) ? inherited[key] : f.def;
  return out;
}

spec window_spec(bool slowdown) {
  std::vector<std::pair<std::string, spec>> f{
      {"worker", required(integer("worker index", nullptr, 0))},
      {"begin", required(number("start of the window (virtual time)", nullptr, 0))},
      {"end", required(number("end of the window (virtual time, > begin)", nullptr, 0))}};
  if (slowdown) f.push_back({"factor", required(number("slow-down factor (>= 1)", nullptr, 1))});
  return object(slowdown ? "a slow-down window" : "an outage window (no progress)", std::move(f));
}

spec worker_time_spec() {
  return object(
      "per-job compute time of each worker (sim/worker_time.hpp)",
      {{"base", choice("base time model: fixed list, 1+i or 1+sqrt(i) (permuted), speed classes, "
                       "OmniLearn core shares, a measured trace",
                       "linear", {"fixed", "linear", "sqrt", "speed_classes", "omnilearn", "trace"})},
       {"permute", boolean("randomly assign the base times to workers (linear, sqrt)", true)},
       {"tau", array("fixed: one time per worker", positive("time", nullptr), json::array())},
       {"trace",
        array("trace: measured jobs (a real run's real_jobs.csv), replayed by start time: a job takes "
              "the duration of its worker's last measured job that started at or before it",
              object("a measured job", {{"worker", required(integer("worker index", nullptr, 0))},
                                        {"start", required(number("its start (model time)", nullptr, 0))},
                                        {"duration", required(positive("its duration (model time)", nullptr))}}),
              json::array())},
       {"classes",
        array("speed_classes: groups of identical workers, in worker order",
              object("a class", {{"count", required(integer("workers in the class", nullptr, 1))},
                                 {"time", required(positive("their time per job", nullptr))}}),
              json::array())},
       {"levels", array("omnilearn: heterogeneity levels in order (one per phase)",
                        choice("level", nullptr, {"HL1", "HL2", "HL4", "HL8"}),
                        json::array({"HL1", "HL2", "HL4", "HL8", "HL8", "HL4", "HL2", "HL1"}))},
       {"mode", choice("omnilearn: BSP (4 workers) or ASP (5 workers) core presets", "bsp",
                       {"bsp", "asp"})},
       {"phase_length", positive("omnilearn: length of one level (jobs or virtual time)", 1e300)},
       {"phase_unit", choice("omnilearn: phases counted in jobs or in virtual time", "jobs",
                             {"jobs", "time"})},
       {"scale", positive("multiplies the base time", 1.0)},
       {"batch_scaling", boolean("duration x batch / reference_batch (compute time grows with the "
                                 "batch: OmniLearn's dynamic batching needs it)",
                                 false)},
       {"reference_batch", integer("batch size the base times are for (0: data.batch)", 0, 0)},
       {"noise", choice("per-job noise added to the base time", "none",
                        {"none", "half_normal"})},
       {"noise_scale", number("noise scale", 1.0, 0)},
       {"noise_growth", choice("half-normal sigma_i: scale*sqrt(i+1), scale*(i+1) or scale",
                               "variance_linear",
                               {"variance_linear", "stddev_linear", "constant"})},
       {"subset_delay",
        object("eager-SGD's injected imbalance: each step `count` random workers take `delay` "
               "more",
               {{"count", integer("delayed workers per step (0: none)", 0, 0)},
                {"delay", number("extra time", 0.0, 0)}})},
       {"outages", array("outage windows", window_spec(false), json::array())},
       {"slowdowns", array("slow-down windows", window_spec(true), json::array())}});
}

}  // namespace

// The row of algorithm `a` (nullptr: none).
const algorithm_row* config_detail::row_of(const std::string& a) {
  for (const auto& r : algorithm_rows())
    if (r.name == a) return &r;
  return nullptr;
}

namespace {

spec method_common() {
  return object("a method",
                {{"label", required(string("name in the table and the charts", nullptr))},
                 {"algorithm", required(choice("algorithm", nullptr, algorithm_names()))},
                 {"optimizer", optimizer_spec()},
                 {"batch", integer("per-worker batch (0: data.batch)", 0, 0)},
                 {"sweep", free_object("this method's grid over its keys (as the experiment's sweep, "
                                       "whose keys it adds to or replaces)")},
                 {"nonfinite", choice("a gradient with an infinity or a NaN: fail (error naming worker "
                                      "and step), skip (dropped, counted) or zero (those entries set to 0)",
                                      "fail", {"fail", "skip", "zero"})}});
}

// A key of run_settings (experiment.hpp), made from its description.
spec run_key(const std::string& name) {
  for (auto& [key, s] : described_fields(run_settings{}))
    if (key == name) return s;
  throw std::logic_error("run_key: run_settings describes no field '" + name + "'");
}

// The model's keys (model_settings' description), each applying to the kinds and presets
// that read it.
std::vector<std::pair<std::string, spec>> model_fields() {
  auto f = described_fields(model_settings{});
  const condition torch{"model.kind", {"torch"}};
  set_applies(f, "hidden", {{"model.kind", {"mlp"}}});
  set_applies(f, "label_smoothing", {{"data.dataset", {"fashion_mnist"}}});  // (the classifiers' loss)
  set_applies(f, "preset", {torch});
  set_applies(f, "input", {torch, {"model.preset", {"lenet5", "resnet8"}}});
  set_applies(f, "threads", {torch});
  for (const char* k : {"context", "layers", "width", "heads"})
    set_applies(f, k, {torch, {"model.preset", {"transformer"}}});
  return f;
}

// The data section: the dataset, its sizes and partition, the batch, the precision and the
// synthetic problems' parameters.
spec data_spec() {
  const condition real_data{"data.dataset", {"fashion_mnist", "text"}};
  const condition worst_case{"data.dataset", {"worst_case_quadratic"}};
  return object("dataset and partition",
               {{"dataset", required(choice("dataset", nullptr,
                                            {"fashion_mnist", "text", "scalar_quadratics",
                                             "worst_case_quadratic"}))},
                {"path", applies_when(string("fashion_mnist: directory of the IDX files (default: Debian's); text: directory "
                                "whose .py files are the corpus (default: the Python standard library of "
                                "/usr/lib/python3.N, the newest N)",
                                ""), {real_data})},
                {"train_samples",
                 applies_when(integer("training samples used (0: all; fashion_mnist: at most its 60000; text: "
                                      "sequences of model.context bytes)",
                                      0, 0),
                              {real_data})},
                {"test_samples", applies_when(integer("test samples used (0: all; fashion_mnist: at most its 10000; "
                                                      "text: validation sequences)",
                                                      0, 0),
                                              {real_data})},
                {"partition", applies_when(choice("how training samples are split over workers", "iid",
                                                  {"iid", "dirichlet", "labels"}),
                                           {real_data})},
                {"alpha", applies_when(positive("Dirichlet concentration", 0.1),
                                       {real_data, {"data.partition", {"dirichlet"}}})},
                {"labels_per_worker", applies_when(integer("labels partition: classes per worker", 2, 1),
                                                   {real_data, {"data.partition", {"labels"}}})},
                {"batch", integer("per-worker mini-batch", 32, 1)},
                {"precision", choice("the model's and gradients' floating point: float32, or float64 (the "
                                     "synthetic problems under the asynchronous server methods on runtime sim)",
                                     "float32", {"float32", "float64"})},
                {"centers", applies_when(array("scalar_quadratics: c_i of f_i = (x - c_i)^2 / 2, one per worker",
                                               number("c_i", nullptr), json::array()),
                                         {{"data.dataset", {"scalar_quadratics"}}})},
                {"dim", applies_when(integer("worst_case_quadratic: dimension",
                                              heterograd::data::worst_case_quadratic::default_dim, 1),
                                      {worst_case})},
                {"smoothness", applies_when(positive("worst_case_quadratic: L", 1.0), {worst_case})},
                {"noise", applies_when(number("quadratics: Gaussian gradient noise sigma per coordinate", 0.0, 0),
                                       {{"data.dataset", {"scalar_quadratics", "worst_case_quadratic"}}})},
                {"noise_model",
                 applies_when(choice("worst_case_quadratic: how the noise enters a gradient: per_coordinate (an "
                        "independent N(0, sigma^2) per coordinate), shared (one N(0, sigma^2) scalar "
                        "added to every coordinate, as the authors' simulator does), multiplicative (the "
                        "gradient times 1 + sigma xi, one xi ~ N(0, 1) a gradient)",
                        "per_coordinate", {"per_coordinate", "shared", "multiplicative"}),
                              {worst_case})},
                {"start", applies_when(choice("worst_case_quadratic: x0: zero, or sqrt_d_e1 (sqrt(dim) e_1, as "
                                              "the papers start)",
                                              "zero", {"zero", "sqrt_d_e1"}),
                                       {worst_case})}});
}

// The target: the metric, its threshold and for how long it must hold.
spec target_spec() {
  return object("what 'reached' means in the tables, and for how long",
               {{"metric", string("metric name", "accuracy")},
                {"value", number("threshold", 0.85)},
                {"below", boolean("reached when the metric is <= value (losses, gradient norms)", false)},
                {"window", optional(number("model time units the target must hold: the time to target is the "
                                           "first evaluation t reaching it such that every evaluation up to "
                                           "the first at or after t + window reaches it too (none if the run "
                                           "ends first; 0: the first crossing, which the tables show beside "
                                           "it); absent: " + fmt(target_settings::default_window_intervals) +
                                           " x eval_interval",
                                           nullptr, 0))}});
}

spec root_spec() {
  const condition real_data{"data.dataset", {"fashion_mnist", "text"}};
  return object(
      "an experiment",
      {{"name", required(string("experiment name", nullptr))},
       {"title", string("one-line title", "")}, {"paper", string("the paper and the number this experiment reproduces", "")},
       {"notes", string("free text", "")},
       {"seed", run_key("seed")},
       {"output", string("output directory (default out/<name>)", "")},
       {"runtime", choice("where workers run: simulated cluster, threads or MPI ranks", "sim",
                          {"sim", "threads", "mpi"})},
       {"clock", choice("threads and mpi: virtual replays the simulator's order (reproducible); "
                        "real runs on the wall clock, results taken as they arrive",
                        "virtual", {"virtual", "real"})},
       {"real_scale",
        optional(number("clock real: wall seconds per model time unit; each job lasts its "
                        "worker-time model's duration x real_scale (absent: jobs take their real "
                        "time and times are wall seconds; clock virtual ignores it)",
                        nullptr, 0, 1e3, true))},
       {"data", data_spec()},
       {"model", applies_when(object("model (fashion_mnist, text)", model_fields()), {real_data})},
       {"optimizer", optimizer_spec()},
       {"workers",
        object("the cluster", {{"count", required(integer("number of workers", nullptr, 1, 1 << 22))},
                               {"time", worker_time_spec()},
                               {"placement", array("clock real: the CPU cores each worker runs on, one "
                                                   "cpulist per worker (\"0\", \"1-3\", \"0,2\"); "
                                                   "workers sharing a core are slower",
                                                   string("cpulist", nullptr), json::array())}})},
       {"network", object("cost of one synchronisation (sim/network.hpp)", described_fields(network_settings{}))},
       {"membership", membership_spec()},
       {"horizon",
        object("when a method stops: exactly one of time, epochs, updates",
               {{"time", optional(positive("virtual time", nullptr))},
                {"epochs", optional(positive("passes over the training set", nullptr))},
                {"updates", optional(integer("model updates", nullptr, 1))}})},
       {"eval_interval", required(run_key("eval_interval"))},
       {"target", target_spec()},
       {"baseline", string("label of the method speed-ups are against (default: the first bsp "
                           "method, else the first)",
                           "")},
       {"checkpoint_every", run_key("checkpoint_every")},
       {"seeds", distinct(array("evaluation seeds: every method runs once with each, and the table gives their mean, "
                       "standard deviation and 95% interval (empty: seed; --seeds overrides)",
                       integer("a seed", nullptr), json::array()))},
       {"sweep", free_object("a grid over method keys, tried for every method: {\"optimizer.lr\": [0.1, 0.01], "
                             "\"batch\": {\"from\": 8, \"to\": 64, \"points\": 4, \"scale\": \"log\"}}; a "
                             "method's own sweep adds or replaces keys. Each method's best setting (tuning) "
                             "is then run on the evaluation seeds")},
       {"tuning",
        object("how a sweep picks each method's setting",
               {{"criterion", choice("time_to_target: most tuning seeds reaching the target, then the least "
                                     "mean time to it (no setting reaching it: the best final metric); final: "
                                     "the best mean final target metric",
                                     "time_to_target", {"time_to_target", "final"})},
                {"seeds", distinct(array("tuning seeds, disjoint from the evaluation seeds (empty: the largest "
                                         "evaluation seed + 1)",
                                         integer("a seed", nullptr), json::array()))}})},
       {"tiny", free_object("overrides for --tiny (a merge patch, checked after merging)")},
       {"methods", array("the methods compared", method_common(), nullptr, 1)}});
}

// Checks one method: common keys, then the algorithm's own keys with their defaults.
json check_method(const json& m, const std::string& path) {
  if (!m.is_object()) throw config_error(path, "expected an object with keys label, algorithm, ...");
  if (!m.contains("algorithm"))
    throw config_error(path + ".algorithm", "missing; expected " + expected(method_common().fields[1].second));
  const spec common = method_common();
  const json& a = m.at("algorithm");
  const algorithm_row* row = a.is_string() ? row_of(a.get<std::string>()) : nullptr;
  if (!row) fail(path + ".algorithm", common.fields[1].second, a);
  spec full = common;
  for (const auto& f : row->keys) full.fields.push_back(f);
  return check_object(full, m, path);
}



// " (applies when ...)": the rule check_applies() holds a given key to, for the docs.
std::string applies_note(const spec& s) {
  return s.applies.empty() ? "" : " (applies when " + applies_text(s.applies) + ")";
}

void doc_rows(const spec& s, const std::string& path, std::string& out) {
  for (const auto& [k, f] : s.fields) {
    const std::string p = path.empty() ? k : path + "." + k;
    if (f.k == kind::object && !f.fields.empty()) {
      out += "| `" + p + "` | object | | " + f.doc + applies_note(f) + " |\n";
      doc_rows(f, p, out);
      continue;
    }
    std::string d = f.required ? "required" : (f.def.is_null() ? "" : f.def.dump());
    if (d.size() > 40) d = d.substr(0, 37) + "...";
    out += "| `" + p + "` | " + expected(f) + " | " + d + " | " + f.doc + applies_note(f) + " |\n";
  }
}

}  // namespace

namespace {
// Library parameters (core/error.hpp's 'name') of the experiment's sections and the keys
// they come from (a method's own parameters come from its row: method_key_of). The second
// member is false: the keys are absolute.
const std::map<std::string, std::pair<std::string, bool>>& section_keys() {
  static const std::map<std::string, std::pair<std::string, bool>> m{
      {"partition_iid.n", {"data.train_samples", false}},
      {"partition_iid.workers", {"workers.count", false}},
      {"partition_dirichlet.workers", {"workers.count", false}},
      {"partition_dirichlet.labels.size", {"data.train_samples", false}},
      {"partition_dirichlet.alpha", {"data.alpha", false}},
      {"partition_dirichlet.classes", {"data.dataset", false}},
      {"partition_k_labels.k", {"data.labels_per_worker", false}},
      {"partition_k_labels.workers", {"workers.count", false}},
      {"dataset.head.n", {"data.train_samples", false}},
      {"worst_case_quadratic.dim", {"data.dim", false}},
      {"worst_case_quadratic.L", {"data.smoothness", false}},
      {"fixed_times.tau", {"workers.time.tau", false}},
      {"speed_classes.classes", {"workers.time.classes", false}},
      {"speed_classes.count", {"workers.time.classes", false}},
      {"linear_times.workers", {"workers.count", false}},
      {"sqrt_times.workers", {"workers.count", false}},
      {"core_share_times.phase_length", {"workers.time.phase_length", false}},
      {"core_share_times.phases", {"workers.time.levels", false}},
      {"core_share_times.seconds_per_sample_core", {"workers.time.scale", false}},
      {"omnilearn_dynamic.schedule", {"workers.time.levels", false}},
      {"half_normal_noise.scale", {"workers.time.noise_scale", false}},
      {"scaled.factor", {"workers.time.scale", false}},
      {"batch_affine_times.per_sample", {"workers.time.reference_batch", false}},
      {"subset_delay.delay", {"workers.time.subset_delay.delay", false}},
      {"subset_delay.delayed", {"workers.time.subset_delay.count", false}},
      {"windows.begin", {"workers.time.outages", false}},
      {"windows.end", {"workers.time.outages", false}},
      {"windows.slowdown", {"workers.time.slowdowns", false}},
      {"mlp.sizes", {"model.hidden", false}},
      {"label_smoothing", {"model.label_smoothing", false}},
      {"bsp.sync_time", {"network", false}},
      {"local_sgd.sync_time", {"network", false}},
      {"selsync.sync_time", {"network", false}},
  };
  return m;
}

// Keys every method object has besides its algorithm's own.
bool common_method_key(const std::string& k) {
  return k == "label" || k == "algorithm" || k == "optimizer" || k == "batch" || k == "nonfinite";
}

// The key of a library parameter 'prefix.field' that a row's configs own: an absolute key the
// driver set the field from (set_from), or the method's key of the field (renamed, else its
// own name) when the method has that key; none otherwise.
std::optional<std::pair<std::string, bool>> method_key_of(const algorithm_row& r, const std::string& pre,
                                                          const std::string& field) {
  if (std::find(r.config_names.begin(), r.config_names.end(), pre) == r.config_names.end()) return std::nullopt;
  for (const auto& [f, key] : r.set_from)
    if (f == field) return std::pair{key, false};
  std::string key = field;
  for (const auto& [f, k] : r.renamed)
    if (f == field) key = k;
  const bool offered = std::any_of(r.keys.begin(), r.keys.end(), [&](const auto& k) { return k.first == key; });
  if (offered || common_method_key(key)) return std::pair{key, true};
  return std::nullopt;
}

// Whether the library prefix of a parameter name belongs to one of the algorithm's configs.
bool library_prefix_of(const std::string& name, const std::string& algorithm) {
  const std::string pre = name.substr(0, name.find('.'));
  const algorithm_row* r = row_of(algorithm);
  return r && std::find(r->config_names.begin(), r->config_names.end(), pre) != r->config_names.end();
}
}  // namespace

config_error from_library_error(const std::invalid_argument& e, const json& config, long method,
                                const std::string& fallback) {
  const std::string what = e.what();
  const std::string head = "heterograd: invalid argument '";
  if (what.rfind(head, 0) != 0) return config_error(fallback, what);
  const auto close = what.find('\'', head.size());
  if (close == std::string::npos) return config_error(fallback, what);
  std::string name = what.substr(head.size(), close - head.size());
  std::string rest = what.substr(close + 1);  // " = value: rule"
  if (rest.rfind(" = ", 0) == 0) rest = rest.substr(3);
  const auto bracket = name.find('[');
  const std::string base = name.substr(0, bracket);
  // The key: a field of a method's library config is the key its row gives (method_key_of);
  // any other library parameter is listed in section_keys().
  std::pair<std::string, bool> where;
  if (const auto dot = base.find('.'); dot != std::string::npos)
    for (const auto& r : algorithm_rows())
      if (auto k = method_key_of(r, base.substr(0, dot), base.substr(dot + 1)); k && where.first.empty()) where = *k;
  if (where.first.empty()) {
    const auto& keys = section_keys();
    const auto it = keys.find(base);
    if (it == keys.end()) return config_error(fallback, what.substr(std::string("heterograd: ").size()));
    where = it->second;
  }
  std::string key = where.first;
  if (where.second) {
    long i = method;
    const json& ms = config.contains("methods") && config["methods"].is_array() ? config["methods"] : json::array();
    if (i < 0)
      for (std::size_t j = 0; j < ms.size() && i < 0; ++j)
        if (ms[j].is_object() && ms[j].contains("algorithm") && ms[j]["algorithm"].is_string() &&
            library_prefix_of(name, ms[j]["algorithm"].get<std::string>()))
          i = static_cast<long>(j);
    key = (i < 0 ? std::string("methods[?]") : "methods[" + std::to_string(i) + "]") + "." + key;
  }
  if (bracket != std::string::npos && where.first.find('.') == std::string::npos) key += name.substr(bracket);
  return config_error(key, "got " + rest);
}

std::vector<std::string> algorithm_names() {
  std::vector<std::string> v;
  for (const auto& r : algorithm_rows()) v.push_back(r.name);
  return v;
}

json resolve(const json& raw) {
  spec root = root_spec();
  // Methods are checked one by one (their keys depend on the algorithm).
  for (auto& [k, f] : root.fields)
    if (k == "methods") f.item->fields.clear();
  json in = raw;
  if (!in.is_object()) throw config_error("", "expected a JSON object (an experiment)");
  json methods = in.contains("methods") ? in["methods"] : json();
  if (in.contains("methods")) in["methods"] = json::array();
  for (std::size_t i = 0; methods.is_array() && i < methods.size(); ++i) in["methods"].push_back(json::object());
  if (in.contains("methods") && !methods.is_array())
    throw config_error("methods", "expected an array of at least 1 method object, got " + shown(methods));
  json out = check_object(root, in, "");
  if (methods.empty()) throw config_error("methods", "expected an array of at least 1 method object, got []");
  out["methods"] = json::array();
  for (std::size_t i = 0; i < methods.size(); ++i) {
    const std::string mp = "methods[" + std::to_string(i) + "]";
    out["methods"].push_back(check_method(methods[i], mp));
    // local_learning's split names modules 2..K: K is its count + 1 (modules, when given, agrees).
    json& m = out["methods"][i];
    if (m["algorithm"] == "local_learning" && !m["split"].empty()) {
      const std::size_t k = m["split"].size() + 1;
      if (methods[i].contains("modules") && m["modules"].get<std::size_t>() != k)
        throw config_error(mp + ".modules", "expected " + std::to_string(k) + " with " + mp + ".split of " +
                                                std::to_string(k - 1) + " name(s) (the first module, and one "
                                                "starting at each name), got " + m["modules"].dump() + "; or leave it out");
      m["modules"] = k;
    }
  }
  // Optimizers: the experiment's kind (default sgd) with its keys; each method's own keys over
  // the experiment's, for the method's kind (default the experiment's).
  const json given = out["optimizer"];
  const std::string top = given.value("kind", std::string(heterograd::optim::sgd::name()));
  out["optimizer"] = resolve_optimizer(top, given, json::object(), "optimizer");
  for (std::size_t i = 0; i < methods.size(); ++i) {
    json& m = out["methods"][i];
    const json own = m["optimizer"];
    m["optimizer"] = resolve_optimizer(own.value("kind", top), own, given,
                                       "methods[" + std::to_string(i) + "].optimizer");
  }
  config_detail::check_cross(out);
  check_applies(root, in, out, "", {});
  config_detail::check_bounds(out);
  return out;
}

namespace {
// Splits "a.b[2].c" into {"a", "b", 2, "c"}: keys joined by '.', each followed by any [N]
// indices. Whatever else would name another key than the text says is refused: an empty key
// ("optimizer..lr" is not optimizer.lr; ".a", "a.", "a.[0]"), an index with no key before it
// ("[0].a"), text right after an index ("a[0]b").
std::vector<json> split_path(const std::string& p) {
  const std::string shown_path = p.size() > 60 ? p.substr(0, 57) + "..." : p;
  auto malformed = [&](const std::string& why) {
    return config_error(shown_path, "expected a key path of non-empty keys joined by '.', each followed by any [N] "
                                    "(workers.count, methods[1].threshold), got " + why);
  };
  std::vector<json> parts;
  std::size_t i = 0;
  while (true) {
    const auto end = std::min(p.find_first_of(".[", i), p.size());
    if (end == i) throw malformed("an empty key at offset " + std::to_string(i));
    parts.emplace_back(p.substr(i, end - i));
    for (i = end; i < p.size() && p[i] == '[';) {
      const auto close = p.find(']', i);
      if (close == std::string::npos) throw config_error(p, "expected a closing ']' in the key path");
      const std::string idx = p.substr(i + 1, close - i - 1);
      if (idx.empty() || idx.find_first_not_of("0123456789") != std::string::npos)
        throw config_error(p, "expected an array index [N], got [" + idx + "]");
      std::size_t n = 0;
      const auto r = std::from_chars(idx.data(), idx.data() + idx.size(), n);
      if (r.ec != std::errc() || r.ptr != idx.data() + idx.size())
        throw config_error(p, "expected an array index [N] below 2^64, got [" + idx + "]");
      parts.emplace_back(n);
      i = close + 1;
    }
    if (parts.size() > max_config_depth)
      throw config_error(p.substr(0, 60) + "...", "expected a key path of at most " + std::to_string(max_config_depth) +
                                                 " keys, got more");
    if (i == p.size()) return parts;
    if (p[i] != '.') throw malformed("'" + p.substr(i, 1) + "' after an index at offset " + std::to_string(i));
    ++i;
  }
}

// Nesting depth of v (bounded: v came from parse_limited).
std::size_t depth_of(const json& v) {
  std::size_t d = 0;
  if (v.is_structured())
    for (const auto& e : v) d = std::max(d, depth_of(e));
  return v.is_structured() ? d + 1 : 0;
}
}  // namespace

void set_key(json& doc, const std::string& path, json value, const std::string& error_key) {
  std::vector<json> parts;
  try {
    parts = split_path(path);
  } catch (const config_error& e) {
    if (error_key.empty()) throw;
    std::string what = e.what();
    const auto colon = what.find("': ");
    throw config_error(error_key, colon == std::string::npos ? what : what.substr(colon + 3));
  }
  if (parts.size() + depth_of(value) > max_config_depth)
    throw config_error(error_key.empty() ? path : error_key,
                       "nested deeper than " + std::to_string(max_config_depth) + " levels with its value");
  json* cur = &doc;
  std::string sofar;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    if (parts[i].is_string()) {
      const std::string k = parts[i];
      sofar += (sofar.empty() ? "" : ".") + k;
      if (!cur->is_object() && !cur->is_null()) throw config_error(error_key.empty() ? sofar : error_key, (error_key.empty() ? "" : sofar + " ") + "is not an object");
      if (last) {
        (*cur)[k] = std::move(value);
      } else {
        if (!cur->contains(k)) (*cur)[k] = parts[i + 1].is_string() ? json::object() : json::array();
        cur = &(*cur)[k];
      }
    } else {
      const std::size_t idx = parts[i];
      // Appended piecewise: g++ 12 warns (-Wrestrict, a false positive) on "[" + to_string().
      sofar += '[';
      sofar += std::to_string(idx);
      sofar += ']';
      if (!cur->is_array() || idx >= cur->size())
        throw config_error(error_key.empty() ? sofar : error_key,
                           "expected an existing array element" + (error_key.empty() ? "" : " at " + sofar) + " (array of " +
                               std::to_string(cur->is_array() ? cur->size() : 0) + ")");
      if (last) (*cur)[idx] = std::move(value);
      else cur = &(*cur)[idx];
    }
  }
}

void apply_override(json& doc, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw config_error(assignment, "expected an assignment key.path=value");
  const std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  (void)split_path(path);  // the path's form first, then its value
  // JSON when it is JSON (too deep or with duplicate keys: an error), else the text itself.
  std::string why;
  auto parsed = parse_limited(text, path, why);
  set_key(doc, path, parsed ? std::move(*parsed) : json(text), "");
}

void select_methods(json& raw, const std::string& names) {
  std::vector<std::string> wanted;
  for (std::size_t begin = 0;;) {
    const auto end = std::min(names.find(',', begin), names.size());
    wanted.push_back(names.substr(begin, end - begin));
    if (end == names.size()) break;
    begin = end + 1;
  }
  if (!raw.is_object() || !raw.contains("methods") || !raw["methods"].is_array()) return;  // resolve() says why
  auto label_of = [](const json& m) {
    return m.is_object() && m.contains("label") && m["label"].is_string() ? m["label"].get<std::string>() : std::string();
  };
  auto picked = [&](const std::string& name, const json& m) {
    const std::string l = label_of(m);
    return !l.empty() && (name == l || name == slug(l));
  };
  for (const auto& name : wanted)
    if (std::none_of(raw["methods"].begin(), raw["methods"].end(), [&](const json& m) { return picked(name, m); })) {
      std::string labels;
      for (const auto& m : raw["methods"])
        if (!label_of(m).empty()) labels += (labels.empty() ? "" : ", ") + shown(m["label"]);
      throw config_error("--methods", "expected comma-separated labels of the experiment's methods (or their folder "
                                      "names), got " + shown(json(name)) + ", which is none of " + labels);
    }
  json kept = json::array();
  for (const auto& m : raw["methods"])
    if (std::any_of(wanted.begin(), wanted.end(), [&](const std::string& name) { return picked(name, m); }))
      kept.push_back(m);
  raw["methods"] = std::move(kept);
  if (raw.contains("baseline") && raw["baseline"].is_string() &&
      std::none_of(raw["methods"].begin(), raw["methods"].end(),
                   [&](const json& m) { return m["label"] == raw["baseline"]; }))
    raw.erase("baseline");
}

std::filesystem::path experiments_dir() {
  // An installed heterograd-run (<prefix>/bin) finds them in <prefix>/share/heterograd.
  return shipped_path("HG_EXPERIMENTS_DIR", HG_INSTALL_EXPERIMENTS, "examples/experiments");
}

std::vector<std::string> list_experiments() {
  std::vector<std::string> v;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(experiments_dir(), ec))
    if (e.path().extension() == ".json") v.push_back(e.path().stem().string());
  std::sort(v.begin(), v.end());
  return v;
}

json parse_config(std::string_view text, const std::string& source) {
  std::string why;
  auto j = parse_limited(text, "", why);
  if (!j) throw config_error("", "'" + source + "' is not valid JSON: " + why);
  return std::move(*j);
}

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), size = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || size <= 0) return 16.0 * (1ull << 30);  // unknown: assume a small machine
  return static_cast<double>(pages) * static_cast<double>(size);
}

json load_experiment(const std::string& name_or_path) {
  std::error_code ec;
  std::filesystem::path p = name_or_path;
  if (!std::filesystem::exists(p, ec)) p = experiments_dir() / (name_or_path + ".json");
  if (!std::filesystem::exists(p, ec)) {
    std::string names;
    for (const auto& n : list_experiments()) names += " " + n;
    throw config_error("", "no file '" + name_or_path + "' and no named experiment of that name in " +
                               experiments_dir().string() + " (named:" + names + ")");
  }
  // Regular files only, and of a configuration's size: a FIFO or /dev/zero is not read forever.
  const auto size = std::filesystem::is_regular_file(p, ec) ? std::filesystem::file_size(p, ec) : 0;
  if (!ec && size > max_config_bytes)
    throw config_error("", "'" + p.string() + "' has " + std::to_string(size) + " bytes; a configuration has at most " +
                               std::to_string(max_config_bytes));
  std::string text;
  try {
    text = read_file(p);
  } catch (const std::exception& e) {
    throw config_error("", e.what());
  }
  return parse_config(text, p.string());
}

std::string schema_markdown() {
  std::string out = "| key | expected | default | meaning |\n|---|---|---|---|\n";
  spec root = root_spec();
  doc_rows(root, "", out);
  out += "\nPer optimizer (`optimizer.kind` and its keys, at the experiment's level or a method's):\n\n";
  for (const auto& k : optimizer_kinds()) {
    out += "- `" + k.name + "`:";
    for (const auto& [key, f] : k.fields) {
      out += " `" + key + "` (" + expected(f) + ", default " + f.def.dump() + ")";
      if (&f != &k.fields.back().second) out += ";";
    }
    out += "\n";
  }
  out += "\nPer algorithm (keys of a method object next to `label`, `algorithm`, `optimizer`, `batch`):\n\n";
  for (const auto& r : algorithm_rows()) {
    const auto& fields = r.keys;
    out += "- `" + r.name + "`:";
    if (fields.empty()) out += " no hyper-parameters";
    for (const auto& [k, f] : fields) {
      out += " `" + k + "` (" + expected(f) + (f.def.is_null() ? "" : ", default " + f.def.dump()) + ")";
      if (&f != &fields.back().second) out += ";";
    }
    out += "\n";
  }
  return out;
}

namespace {
// One schema node as JSON Schema (draft 2020-12): the same kinds, ranges, choices, defaults and
// meanings the checker uses, so an editor or a validator sees what resolve() accepts.
json json_schema_of(const spec& s) {
  json j = json::object();
  if (!s.doc.empty()) j["description"] = s.doc + applies_note(s);
  auto bounds = [&](json& n) {
    if (std::isfinite(s.lo)) n[s.lo_open ? "exclusiveMinimum" : "minimum"] = s.lo;
    if (std::isfinite(s.hi)) n[s.hi_open ? "exclusiveMaximum" : "maximum"] = s.hi;
  };
  switch (s.k) {
    case kind::integer:
      j["type"] = "integer";
      bounds(j);
      break;
    case kind::number:
      j["type"] = "number";
      bounds(j);
      break;
    case kind::boolean: j["type"] = "boolean"; break;
    case kind::string: j["type"] = "string"; break;
    case kind::choice: j["enum"] = s.choices; break;
    case kind::count_or_inf:
      j["anyOf"] = json::array({json{{"type", "integer"}, {"minimum", s.lo}}, json{{"const", "inf"}}});
      break;
    case kind::object: {
      j["type"] = "object";
      if (s.free_form) break;
      json props = json::object(), req = json::array();
      for (const auto& [k, f] : s.fields) {
        props[k] = json_schema_of(f);
        if (f.required) req.push_back(k);
      }
      j["properties"] = std::move(props);
      if (!req.empty()) j["required"] = std::move(req);
      j["additionalProperties"] = false;
      break;
    }
    case kind::array:
      j["type"] = "array";
      j["items"] = json_schema_of(*s.item);
      if (s.min_items) j["minItems"] = s.min_items;
      if (s.unique_items) j["uniqueItems"] = true;
      break;
  }
  if (!s.def.is_null() && s.k != kind::object) j["default"] = s.def;
  return j;
}
}  // namespace

json schema_json() {
  json root = json_schema_of(root_spec());
  // A method's keys depend on its algorithm: the common keys, then one branch per algorithm
  // adding its own; unevaluatedProperties sees the branch's keys (additionalProperties would
  // not).
  const spec common = method_common();
  json m = json_schema_of(common);
  m.erase("additionalProperties");
  json branches = json::array();
  for (const auto& r : algorithm_rows()) {
    json props = json::object();
    for (const auto& [k, f] : r.keys) props[k] = json_schema_of(f);
    branches.push_back({{"if", {{"properties", {{"algorithm", {{"const", r.name}}}}}}},
                        {"then", {{"properties", std::move(props)}}}});
  }
  m["allOf"] = std::move(branches);
  m["unevaluatedProperties"] = false;
  // An optimizer's keys depend on its kind: one branch per kind, with its defaults (a
  // method's optimizer has no default kind: it inherits the experiment's).
  auto optimizer_node = [](json o) {
    json kinds = json::array();
    for (const auto& k : optimizer_kinds()) {
      json props = json::object(), names = json::array({"kind"});
      for (const auto& [key, f] : k.fields) {
        props[key] = json_schema_of(f);
        names.push_back(key);
      }
      // propertyNames: a key of another kind is refused, as resolve() refuses it.
      kinds.push_back({{"if", {{"properties", {{"kind", {{"const", k.name}}}}}, {"required", json::array({"kind"})}}},
                       {"then", {{"properties", std::move(props)}, {"propertyNames", {{"enum", std::move(names)}}}}}});
    }
    o["allOf"] = std::move(kinds);
    return o;
  };
  m["properties"]["optimizer"] = optimizer_node(m["properties"]["optimizer"]);
  root["properties"]["optimizer"] = optimizer_node(root["properties"]["optimizer"]);
  root["properties"]["optimizer"]["properties"]["kind"]["default"] = heterograd::optim::sgd::name();
  root["properties"]["methods"]["items"] = std::move(m);
  json out = {{"$schema", "https://json-schema.org/draft/2020-12/schema"},
              {"$id", "https://heterograd.invalid/heterograd-run/experiment.schema.json"},
              {"title", "heterograd-run experiment"}};
  out.update(root);
  return out;
}

std::string slug(const std::string& label) {
  std::string s;
  for (char c : label) {
    if (std::isalnum(static_cast<unsigned char>(c))) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!s.empty() && s.back() != '-') s += '-';
  }
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s;
}

}  // namespace hgrun
