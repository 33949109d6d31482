// heterograd-run's configuration entry points besides the schema (config_schema.cpp) and its
// checker (config_validate.cpp): a library error mapped to the key it came from, --set
// overrides, --methods, and finding, parsing and loading an experiment.
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
using config_detail::applies_text;
using config_detail::check_applies;
using config_detail::check_object;
using config_detail::expected;
using config_detail::fail;
using config_detail::parse_limited;
using config_detail::shown;

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
