#include "sweep.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

namespace hgrun {

namespace {

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// Keys a sweep may not vary: they say which method it is.
bool fixed_key(const std::string& key) {
  const std::string head = key.substr(0, key.find_first_of(".["));
  return head == "label" || head == "algorithm" || head == "sweep";
}

double round_to(double x, int digits) {
  if (x == 0 || !std::isfinite(x)) return x;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, x);
  return std::strtod(buf, nullptr);
}

// A key's values: an array, or a {from, to, points, scale} range.
std::vector<json> values_of(const json& v, const std::string& path) {
  std::vector<json> out;
  if (v.is_array()) {
    if (v.empty() || v.size() > max_sweep_values)
      throw config_error(path, "expected an array of 1 to " + std::to_string(max_sweep_values) +
                                   " values, got " + std::to_string(v.size()));
    for (const auto& x : v) out.push_back(x);
  } else if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it)
      if (it.key() != "from" && it.key() != "to" && it.key() != "points" && it.key() != "scale")
        throw config_error(path + "." + it.key(), "unknown key; expected one of: from, to, points, scale");
    for (const char* k : {"from", "to", "points"})
      if (!v.contains(k) || !v[k].is_number() || !std::isfinite(v[k].get<double>()))
        throw config_error(path + "." + k, "expected a finite number, got " + (v.contains(k) ? shown(v[k]) : "nothing"));
    const double a = v["from"].get<double>(), b = v["to"].get<double>(), p = v["points"].get<double>();
    if (!(p >= 1 && p <= static_cast<double>(max_sweep_values) && std::nearbyint(p) == p))
      throw config_error(path + ".points", "expected an integer in [1, " + std::to_string(max_sweep_values) +
                                               "], got " + shown(v["points"]));
    const std::string scale = v.value("scale", json("linear")).is_string() ? v.value("scale", std::string("linear")) : "?";
    if (scale != "linear" && scale != "log")
      throw config_error(path + ".scale", "expected \"linear\" or \"log\", got " + shown(v["scale"]));
    if (scale == "log" && !(a > 0 && b > 0))
      throw config_error(path + (a > 0 ? ".to" : ".from"), "expected a number > 0 for a log scale, got " +
                                                             shown(a > 0 ? v["to"] : v["from"]));
    const auto n = static_cast<std::size_t>(p);
    for (std::size_t j = 0; j < n; ++j) {
      const double f = n == 1 ? 0.0 : static_cast<double>(j) / static_cast<double>(n - 1);
      const double x = scale == "log" ? round_to(a * std::pow(b / a, f), 4) : a + (b - a) * f;
      // Whole numbers as integers (a batch of 16, not 16.0).
      if (std::nearbyint(x) == x && std::abs(x) < 9007199254740992.0) out.emplace_back(static_cast<std::int64_t>(x));
      else out.emplace_back(x);
    }
  } else {
    throw config_error(path, "expected an array of values or {\"from\", \"to\", \"points\", \"scale\"}, got " + shown(v));
  }
  return out;
}

// Reads one "sweep" object into (key, values) pairs, in the object's key order.
void read_sweep(const json& s, const std::string& path, std::vector<std::pair<std::string, std::vector<json>>>& into) {
  if (!s.is_object())
    throw config_error(path, "expected an object {\"<method key>\": [values], ...}, got " + shown(s));
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string key = it.key(), p = path + "." + key;
    if (key.empty() || fixed_key(key))
      throw config_error(p, "expected a key of a method to vary (label, algorithm and sweep name the method)");
    // The key path's form (set_key() checks it the same way).
    json probe = json::object();
    set_key(probe, key, json(0), p);
    auto values = values_of(it.value(), p);
    const auto same = std::find_if(into.begin(), into.end(), [&](const auto& kv) { return kv.first == key; });
    if (same != into.end()) same->second = std::move(values);
    else into.emplace_back(key, std::move(values));
  }
}

}  // namespace

std::vector<sweep_grid> sweep_grids(const json& raw) {
  std::vector<std::pair<std::string, std::vector<json>>> common;
  if (raw.contains("sweep")) read_sweep(raw["sweep"], "sweep", common);
  std::vector<sweep_grid> grids;
  if (!raw.contains("methods") || !raw["methods"].is_array()) return grids;
  for (std::size_t i = 0; i < raw["methods"].size(); ++i) {
    const json& m = raw["methods"][i];
    auto keys = common;
    const std::string mp = "methods[" + std::to_string(i) + "].sweep";
    if (m.is_object() && m.contains("sweep")) read_sweep(m["sweep"], mp, keys);
    sweep_grid g;
    std::size_t total = 1;
    for (const auto& [k, v] : keys) {
      g.keys.push_back(k);
      total *= v.size();
      if (total > max_sweep_settings)
        throw config_error(mp, "expected at most " + std::to_string(max_sweep_settings) +
                                   " settings per method (the product of the keys' value counts), got more with " + k);
    }
    g.settings.assign(total, {});
    for (std::size_t s = 0; s < total; ++s) {
      std::size_t rest = s, stride = total;
      for (const auto& [k, v] : keys) {
        stride /= v.size();
        g.settings[s].push_back(v[rest / stride]);
        rest %= stride;
      }
    }
    grids.push_back(std::move(g));
  }
  return grids;
}

std::string setting_text(const sweep_grid& g, std::size_t s) {
  std::string t;
  for (std::size_t k = 0; k < g.keys.size(); ++k)
    t += (k ? ", " : "") + g.keys[k] + "=" + (g.settings[s][k].is_string() ? g.settings[s][k].get<std::string>()
                                                                               : g.settings[s][k].dump());
  return t;
}

json setting_json(const sweep_grid& g, std::size_t s) {
  json o = json::object();
  for (std::size_t k = 0; k < g.keys.size(); ++k) o[g.keys[k]] = g.settings[s][k];
  return o;
}

namespace {
json with_setting(json m, const sweep_grid& g, std::size_t s) {
  if (!m.is_object()) return m;
  m.erase("sweep");
  for (std::size_t k = 0; k < g.keys.size(); ++k) set_key(m, g.keys[k], g.settings[s][k], "sweep." + g.keys[k]);
  return m;
}
}  // namespace

json expand_methods(const json& raw, const std::vector<sweep_grid>& grids, std::vector<expanded_method>& which) {
  json out = raw;
  out.erase("baseline");
  out["methods"] = json::array();
  which.clear();
  std::set<std::string> slugs;
  for (std::size_t i = 0; i < grids.size(); ++i) {
    const json& m = raw["methods"][i];
    const std::string label = m.is_object() && m.contains("label") && m["label"].is_string() ? m["label"].get<std::string>() : "";
    for (std::size_t s = 0; s < grids[i].size(); ++s) {
      json e = with_setting(m, grids[i], s);
      if (e.is_object() && !grids[i].keys.empty()) {
        // The setting in the label; its index where the text would make a folder name too long
        // or one another setting has (0.1 and -0.1 both give "0-1").
        std::string l = label + " [" + setting_text(grids[i], s) + "]";
        if (slug(l).size() > max_slug_bytes || slugs.count(slug(l))) l = label + " [setting " + std::to_string(s + 1) + "]";
        slugs.insert(slug(l));
        e["label"] = l;
      }
      out["methods"].push_back(std::move(e));
      which.push_back({i, s});
    }
  }
  return out;
}

json apply_settings(const json& raw, const std::vector<sweep_grid>& grids, const std::vector<std::size_t>& chosen) {
  json out = raw;
  for (std::size_t i = 0; i < grids.size(); ++i) out["methods"][i] = with_setting(raw["methods"][i], grids[i], chosen[i]);
  return out;
}

json resolve_expanded(const json& expanded, const json& raw, const std::vector<sweep_grid>& grids,
                      const std::vector<expanded_method>& which) {
  try {
    return resolve(expanded);
  } catch (const config_error& e) {
    const std::string& p = e.path();
    if (p.rfind("methods[", 0) != 0) throw;
    const auto close = p.find(']');
    const std::size_t k = std::strtoull(p.c_str() + 8, nullptr, 10);
    if (close == std::string::npos || k >= which.size()) throw;
    const auto [i, s] = which[k];
    const std::string rest = p.substr(close + 1);  // ".optimizer.lr"
    const std::string key = rest.empty() ? rest : rest.substr(1);
    const sweep_grid& g = grids[i];
    // The swept key the error is at (or inside), else the method's own key.
    std::string where = "methods[" + std::to_string(i) + "]" + rest;
    for (const auto& sk : g.keys)
      if (key == sk || key.rfind(sk + ".", 0) == 0 || key.rfind(sk + "[", 0) == 0) {
        const bool own = raw["methods"][i].is_object() && raw["methods"][i].contains("sweep") &&
                         raw["methods"][i]["sweep"].is_object() && raw["methods"][i]["sweep"].contains(sk);
        where = (own ? "methods[" + std::to_string(i) + "].sweep." : std::string("sweep.")) + sk;
      }
    const std::string label = raw["methods"][i].is_object() && raw["methods"][i].contains("label")
                                  ? shown(raw["methods"][i]["label"])
                                  : "#" + std::to_string(i);
    std::string what = e.what();
    const auto colon = what.find("': ");
    if (colon != std::string::npos) what = what.substr(colon + 3);
    throw config_error(where, "method " + label + " with setting " + setting_text(g, s) + ": " + what);
  }
}

std::vector<std::uint64_t> parse_seeds(const std::string& text) {
  std::vector<std::uint64_t> seeds;
  std::set<std::uint64_t> seen;
  for (std::size_t begin = 0;;) {
    const auto end = std::min(text.find(',', begin), text.size());
    const std::string t = text.substr(begin, end - begin);
    std::uint64_t v = 0;
    const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || r.ec != std::errc() || r.ptr != t.data() + t.size() || v > max_seed)
      throw config_error("--seeds", "expected comma-separated integers in [0, " + std::to_string(max_seed) +
                                        "] (a seed's bound, as the configuration's), got " + shown(json(t)));
    if (!seen.insert(v).second)
      throw config_error("--seeds", "expected distinct seeds, got " + std::to_string(v) + " twice");
    seeds.push_back(v);
    if (end == text.size()) return seeds;
    begin = end + 1;
  }
}

namespace {

// tuning.seeds, else the largest evaluation seed + 1 (refused past max_seed: no seed wraps),
// disjoint from the evaluation seeds.
std::vector<std::uint64_t> tuning_seeds_of(const json& c, const std::vector<std::uint64_t>& evaluation) {
  std::vector<std::uint64_t> t = c["tuning"]["seeds"].get<std::vector<std::uint64_t>>();
  if (t.empty()) {
    const std::uint64_t top = *std::max_element(evaluation.begin(), evaluation.end());
    if (top >= max_seed)
      throw config_error("tuning.seeds", "expected tuning seeds with a sweep whose largest evaluation seed is " +
                                             std::to_string(top) + ": the default, that seed + 1, passes a seed's bound " +
                                             std::to_string(max_seed) + "; list tuning.seeds");
    t = {top + 1};
  }
  const std::set<std::uint64_t> eval(evaluation.begin(), evaluation.end());
  for (const auto x : t)
    if (eval.count(x))
      throw config_error("tuning.seeds", "expected seeds disjoint from the evaluation seeds (a setting chosen on "
                                         "a seed must be evaluated on fresh ones), got " +
                                             std::to_string(x) + " in both");
  return t;
}

// At most max_runs runs: `methods` x `seeds` evaluation runs, `settings` x `tuning` tuning runs.
// The key named is the one with the larger count in the larger part.
void check_runs(std::size_t methods, std::size_t seeds, const std::string& seeds_key, std::size_t settings,
                std::size_t tuning) {
  const double eval = static_cast<double>(methods) * static_cast<double>(seeds);
  const double tune = static_cast<double>(settings) * static_cast<double>(tuning);
  if (eval + tune <= static_cast<double>(max_runs)) return;
  const std::string key = eval >= tune ? (seeds >= methods ? seeds_key : "methods")
                                       : (tuning > settings ? "tuning.seeds" : "sweep");
  std::string what = std::to_string(methods) + " method(s) x " + std::to_string(seeds) + " evaluation seed(s) (" +
                     seeds_key + ")";
  if (tuning > 0)
    what += " + " + std::to_string(settings) + " setting(s) of the methods' grids (sweep) x " +
            std::to_string(tuning) + " tuning seed(s) (tuning.seeds)";
  char total[32];
  std::snprintf(total, sizeof total, "%.0f", eval + tune);
  throw config_error(key, "expected at most " + std::to_string(max_runs) +
                              " runs in all (each run's work is bounded, and so is an invocation's), got " + what +
                              " = " + total);
}

}  // namespace

run_seeds seeds_of(const json& c, const std::vector<sweep_grid>& grids, const std::vector<std::uint64_t>& cli) {
  // (resolve() held seed, seeds and tuning.seeds to max_seed and each list to distinct seeds;
  // parse_seeds() held --seeds to the same.)
  run_seeds s;
  const bool listed = !c["seeds"].empty();
  const std::string key = !cli.empty() ? "--seeds" : listed ? "seeds" : "seed";
  s.evaluation = !cli.empty() ? cli
                 : listed     ? c["seeds"].get<std::vector<std::uint64_t>>()
                              : std::vector<std::uint64_t>{c["seed"].get<std::uint64_t>()};
  std::size_t settings = 0;
  bool sweeping = false;
  for (const auto& g : grids) {
    settings += g.size();
    sweeping = sweeping || g.size() > 1;
  }
  if (sweeping) s.tuning = tuning_seeds_of(c, s.evaluation);
  check_runs(c["methods"].size(), s.evaluation.size(), key, settings, s.tuning.size());
  return s;
}

double t975(std::size_t df) {
  static constexpr double table[] = {
      12.706204736, 4.302652730, 3.182446305, 2.776445105, 2.570581836, 2.446911851, 2.364624252, 2.306004135,
      2.262157163,  2.228138852, 2.200985160, 2.178812830, 2.160368656, 2.144786688, 2.131449546, 2.119905299,
      2.109815578,  2.100922040, 2.093024054, 2.085963447, 2.079613845, 2.073873068, 2.068657610, 2.063898562,
      2.059538553,  2.055529439, 2.051830516, 2.048407142, 2.045229642, 2.042272456};
  if (df == 0) return std::numeric_limits<double>::quiet_NaN();
  if (df <= 30) return table[df - 1];
  // Cornish-Fisher expansion of t in powers of 1/df around the normal quantile.
  const double z = 1.959963984540054, n = static_cast<double>(df);
  const double z3 = z * z * z, z5 = z3 * z * z, z7 = z5 * z * z;
  return z + (z3 + z) / (4 * n) + (5 * z5 + 16 * z3 + 3 * z) / (96 * n * n) +
         (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * n * n * n);
}

json seed_stats::to_json() const {
  if (n == 0) return json{{"n", 0}, {"mean", nullptr}, {"sd", nullptr}, {"ci95", nullptr}};
  return json{{"n", n}, {"mean", mean}, {"sd", n > 1 ? json(sd) : json(nullptr)}, {"ci95", n > 1 ? json(ci95) : json(nullptr)}};
}

seed_stats stats_of(const std::vector<double>& xs) {
  seed_stats s;
  double sum = 0;
  for (double x : xs)
    if (std::isfinite(x)) {
      sum += x;
      ++s.n;
    }
  if (s.n == 0) return s;
  s.mean = sum / static_cast<double>(s.n);
  double ss = 0;
  for (double x : xs)
    if (std::isfinite(x)) ss += (x - s.mean) * (x - s.mean);
  if (s.n > 1) {
    s.sd = std::sqrt(ss / static_cast<double>(s.n - 1));
    s.ci95 = t975(s.n - 1) * s.sd / std::sqrt(static_cast<double>(s.n));
  }
  return s;
}

candidate_score score_of(const std::vector<json>& summaries, const std::string& metric) {
  candidate_score c;
  std::vector<double> times, firsts, finals;
  for (const auto& s : summaries) {
    ++c.seeds;
    if (s.is_null()) {
      ++c.failed;
      continue;
    }
    if (s.contains("time_to_target") && s["time_to_target"].is_number()) {
      ++c.reached;
      times.push_back(s["time_to_target"].get<double>());
    }
    if (s.contains("first_crossing") && s["first_crossing"].is_number()) {
      ++c.crossed;
      firsts.push_back(s["first_crossing"].get<double>());
    }
    const bool has = s.contains("final") && s["final"].contains(metric) && s["final"][metric].is_number();
    const double v = has ? s["final"][metric].get<double>() : std::numeric_limits<double>::quiet_NaN();
    if (std::isfinite(v)) finals.push_back(v);
    else ++c.nonfinite;
  }
  c.time = stats_of(times);
  c.first = stats_of(firsts);
  c.final_ = stats_of(finals);
  return c;
}

std::size_t best_candidate(const std::vector<candidate_score>& c, const std::string& criterion, bool below) {
  // a before b: strictly better.
  auto final_better = [&](const candidate_score& a, const candidate_score& b) {
    // Seeds without a finite final value (failed, diverged) rank below finite ones.
    const std::size_t fa = a.final_.n, fb = b.final_.n;
    if (fa != fb) return fa > fb;
    if (fa == 0) return false;
    return below ? a.final_.mean < b.final_.mean : a.final_.mean > b.final_.mean;
  };
  auto better = [&](const candidate_score& a, const candidate_score& b) {
    if (criterion == "time_to_target") {
      if (a.reached != b.reached) return a.reached > b.reached;
      if (a.reached > 0) return a.time.mean < b.time.mean;
    }
    return final_better(a, b);
  };
  std::size_t best = 0;
  for (std::size_t i = 1; i < c.size(); ++i)
    if (better(c[i], c[best])) best = i;
  return best;
}

json score_json(const candidate_score& c, const std::string& criterion) {
  const bool by_time = criterion == "time_to_target" && c.reached > 0;
  json j = (by_time ? c.time : c.final_).to_json();
  j["of"] = by_time ? "time_to_target" : "final";
  return j;
}

}  // namespace hgrun
