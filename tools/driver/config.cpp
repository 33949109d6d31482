// The schema of heterograd-run's experiment files, its checker and the override parser.
#include "config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#ifndef HG_SOURCE_DIR
#define HG_SOURCE_DIR "."
#endif

namespace hgrun {

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------------------------
// A small schema language: each node knows its kind, range, choices, default and meaning.

enum class kind { integer, number, boolean, string, choice, object, array, count_or_inf };

struct spec {
  kind k = kind::number;
  std::string doc;
  json def;                  // null: no default
  bool required = false;
  double lo = -inf, hi = inf;
  bool lo_open = false, hi_open = false;
  std::vector<std::string> choices;
  std::vector<std::pair<std::string, spec>> fields;  // object
  std::shared_ptr<spec> item;                        // array
  std::size_t min_items = 0;
  std::size_t max_items = std::numeric_limits<std::size_t>::max();
  bool free_form = false;  // object: any keys (checked elsewhere)
};

spec integer(std::string doc, json def, double lo = 0, double hi = 1e15) {
  spec s;
  s.k = kind::integer;
  s.doc = std::move(doc);
  s.def = std::move(def);
  s.lo = lo;
  s.hi = hi;
  return s;
}
spec number(std::string doc, json def, double lo = -inf, double hi = inf, bool lo_open = false,
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
spec positive(std::string doc, json def) { return number(std::move(doc), std::move(def), 0, inf, true); }
spec boolean(std::string doc, json def) {
  spec s;
  s.k = kind::boolean;
  s.doc = std::move(doc);
  s.def = std::move(def);
  return s;
}
spec string(std::string doc, json def) {
  spec s;
  s.k = kind::string;
  s.doc = std::move(doc);
  s.def = std::move(def);
  return s;
}
spec choice(std::string doc, json def, std::vector<std::string> options) {
  spec s;
  s.k = kind::choice;
  s.doc = std::move(doc);
  s.def = std::move(def);
  s.choices = std::move(options);
  return s;
}
spec object(std::string doc, std::vector<std::pair<std::string, spec>> fields) {
  spec s;
  s.k = kind::object;
  s.doc = std::move(doc);
  s.fields = std::move(fields);
  s.def = json::object();
  return s;
}
spec free_object(std::string doc) {
  spec s = object(std::move(doc), {});
  s.free_form = true;
  return s;
}
spec array(std::string doc, spec item, json def, std::size_t min_items = 0) {
  spec s;
  s.k = kind::array;
  s.doc = std::move(doc);
  s.item = std::make_shared<spec>(std::move(item));
  s.def = std::move(def);
  s.min_items = min_items;
  return s;
}
spec count_or_inf(std::string doc, json def, double lo) {
  spec s;
  s.k = kind::count_or_inf;
  s.doc = std::move(doc);
  s.def = std::move(def);
  s.lo = lo;
  return s;
}
spec required(spec s) {
  s.required = true;
  s.def = nullptr;
  return s;
}
spec optional(spec s) {  // absent means "not set" (no default written)
  s.def = nullptr;
  return s;
}

std::string fmt(double x) {
  if (std::fabs(x) < 1e15 && x == std::nearbyint(x)) return std::to_string(static_cast<long long>(x));
  std::ostringstream os;
  os << x;
  return os.str();
}

std::string range_text(const spec& s) {
  const bool has_lo = std::isfinite(s.lo), has_hi = std::isfinite(s.hi);
  if (has_lo && has_hi && s.k == kind::integer && s.hi >= 1e15) return " >= " + fmt(s.lo);
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
             " of " + expected(*s.item);
  }
  return "?";
}

std::string shown(const json& v) {
  std::string t = v.dump();
  if (t.size() > 60) t = t.substr(0, 57) + "...";
  return t;
}

[[noreturn]] void fail(const std::string& path, const spec& s, const json& v) {
  throw config_error(path, "expected " + expected(s) + ", got " + shown(v));
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
      throw config_error(path.empty() ? it.key() : path + "." + it.key(),
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
      if (!v.is_number()) fail(path, s, v);
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
      for (std::size_t i = 0; i < v.size(); ++i)
        out.push_back(check(*s.item, v[i], path + "[" + std::to_string(i) + "]"));
      return out;
    }
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// The schema.

spec optimizer_spec(bool partial) {
  auto o = object("the optimizer (every worker's, or the server's for asynchronous methods)",
                  {{"kind", choice("optimizer", "sgd", {"sgd", "momentum"})},
                   {"lr", positive("learning rate (gamma of the papers)", 0.05)},
                   {"momentum", number("heavy-ball momentum (kind momentum)", 0.9, 0, 1, false, true)},
                   {"weight_decay", number("L2 weight decay", 0.0, 0)}});
  if (partial)
    for (auto& [k, f] : o.fields) f.def = nullptr;
  return o;
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
                       "OmniLearn core shares",
                       "linear", {"fixed", "linear", "sqrt", "speed_classes", "omnilearn"})},
       {"permute", boolean("randomly assign the base times to workers (linear, sqrt)", true)},
       {"tau", array("fixed: one time per worker", positive("time", nullptr), json::array())},
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

// Per-algorithm hyper-parameters (the method object holds them next to label and algorithm).
const std::map<std::string, std::vector<std::pair<std::string, spec>>>& algorithm_params() {
  static const std::map<std::string, std::vector<std::pair<std::string, spec>>> m{
      {"bsp",
       {{"aggregation", choice("what a step averages", "gradients", {"gradients", "parameters"})},
        {"weighting", choice("aggregation weights", "sample_weighted", {"sample_weighted", "uniform"})}}},
      {"omnilearn",
       {{"min_batch", integer("b_min", 16, 1)},
        {"max_batch", integer("b_max (memory bound)", 96, 1)},
        {"deadband", number("relative change ignored", 0.2, 0, 1, false, true)},
        {"gain", number("P-controller gain k_p", 1.0, 0, 1, true, false)},
        {"rebalance_every", integer("rounds between controller runs (0: one epoch)", 0, 0)}}},
      {"local_sgd",
       {{"period", integer("H: local steps per round (the fastest worker's with speed_proportional)", 8, 1)},
        {"local_steps", array("per-worker H_i (overrides period)", integer("H_i", nullptr, 1), json::array())},
        {"speed_proportional", boolean("H_i proportional to worker speed: H_i = max(1, round(H * "
                                       "tau_min / tau_i)) from the mean job times",
                                       false)},
        {"weighting", choice("model averaging weights", "uniform", {"uniform", "sample_weighted"})},
        {"states", choice("optimizer states at a sync", "keep_local", {"keep_local", "average", "reset"})}}},
      {"selsync",
       {{"threshold", number("Delta_thr on the EWMA of relative gradient-norm change", 0.3, 0)},
        {"window", integer("EWMA window w (warm-up steps)", 25, 1)},
        {"alpha", number("EWMA smoothing", 0.01, 0, 1, true, false)},
        {"aggregation", choice("what a synchronising step averages", "parameters", {"parameters", "gradients"})}}},
      {"eager",
       {{"mode", choice("partial allreduce", "majority", {"majority", "solo"})},
        {"staleness_bound", integer("B: rounds a late gradient may lag", 4, 1)}}},
      {"biased_local_sgd",
       {{"slow_workers", array("indices of the slow workers", integer("worker", nullptr, 0), json::array())},
        {"local_steps", array("per-worker H_i", integer("H_i", nullptr, 1), json::array())},
        {"ratio", integer("r: candidate pool / slow samples", 4, 1)},
        {"shuffle_rounds", integer("rounds between redraws", 1, 1)},
        {"biased", boolean("loss-based top-k samples for the slow workers", true)}}},
      {"asgd", {}},
      {"delay_adaptive", {{"reference", integer("n of gamma*n/max(n, delay) (0: workers)", 0, 0)}}},
      {"ringmaster",
       {{"threshold", count_or_inf("R: delay threshold", 16, 1)},
        {"variant", choice("discard stale gradients, or interrupt stale computations", "interrupt",
                           {"discard", "interrupt"})}}},
      {"rescaled",
       {{"ema", number("EMA weight of the newest job time", 0.2, 0, 1, true, false)},
        {"reference", number("tau_ref (0: largest estimate)", 0.0, 0)},
        {"known_tau", boolean("start from the time model's mean tau_i", false)}}},
      {"rennala", {{"gradients", integer("B: fresh gradients per step (Rennala's batch)", 6, 1)}}},
      {"ia2sgd", {}},
      {"malenia", {{"threshold", positive("S: harmonic-mean count per step", 1.0)}}},
      {"ringleader", {}},
      {"ssp", {{"staleness", integer("s", 3, 0)}}},
      {"dssp", {{"lower", integer("s_L", 3, 0)}, {"range", integer("r_max", 12, 0)}}},
      {"local_learning",
       {{"modules", integer("K gradient-isolated modules (1: end-to-end backprop)", 2, 1)},
        {"head_hidden", array("hidden widths of each auxiliary head", integer("width", nullptr, 1), json::array())},
        {"pgl_period", integer("PGL: a global step every P iterations (0: never)", 0, 0)},
        {"pgl_epoch_fraction", number("PGL: global steps during this first fraction of epochs", 0.0, 0, 1)}}},
  };
  return m;
}

spec method_common() {
  return object("a method",
                {{"label", required(string("name in the table and the charts", nullptr))},
                 {"algorithm", required(choice("algorithm", nullptr, algorithm_names()))},
                 {"optimizer", optimizer_spec(true)},
                 {"batch", integer("per-worker batch (0: data.batch)", 0, 0)},
                 {"nonfinite", choice("a gradient with an infinity or a NaN: fail (error naming worker "
                                      "and step), skip (dropped, counted) or zero (those entries set to 0)",
                                      "fail", {"fail", "skip", "zero"})}});
}

spec root_spec() {
  return object(
      "an experiment",
      {{"name", required(string("experiment name", nullptr))},
       {"title", string("one-line title", "")},
       {"paper", string("the paper and the number this experiment reproduces", "")},
       {"notes", string("free text", "")},
       {"seed", integer("seed of every random draw", 1, 0)},
       {"output", string("output directory (default out/<name>)", "")},
       {"runtime", choice("where workers run: simulated cluster, threads or MPI ranks", "sim",
                          {"sim", "threads", "mpi"})},
       {"data",
        object("dataset and partition",
               {{"dataset", required(choice("dataset", nullptr,
                                            {"fashion_mnist", "scalar_quadratics",
                                             "worst_case_quadratic"}))},
                {"path", string("directory of the IDX files (default: Debian's)", "")},
                {"train_samples", integer("training samples used (0: all)", 0, 0)},
                {"test_samples", integer("test samples used (0: all)", 0, 0)},
                {"partition", choice("how training samples are split over workers", "iid",
                                     {"iid", "dirichlet", "labels"})},
                {"alpha", positive("Dirichlet concentration", 0.1)},
                {"labels_per_worker", integer("labels partition: classes per worker", 2, 1)},
                {"batch", integer("per-worker mini-batch", 32, 1)},
                {"centers", array("scalar_quadratics: c_i of f_i = (x - c_i)^2 / 2, one per worker",
                                  number("c_i", nullptr), json::array())},
                {"dim", integer("worst_case_quadratic: dimension", 200, 1)},
                {"smoothness", positive("worst_case_quadratic: L", 1.0)},
                {"noise", number("quadratics: Gaussian gradient noise sigma per coordinate", 0.0, 0)}})},
       {"model",
        object("model (fashion_mnist)",
               {{"kind", choice("model", "mlp", {"mlp", "softmax"})},
                {"hidden", array("hidden layer widths (mlp)", integer("width", nullptr, 1), json::array({64}))},
                {"label_smoothing", number("label smoothing", 0.0, 0, 1, false, true)}})},
       {"optimizer", optimizer_spec(false)},
       {"workers",
        object("the cluster", {{"count", required(integer("number of workers", nullptr, 1, 1 << 22))},
                               {"time", worker_time_spec()}})},
       {"network",
        object("cost of one synchronisation (sim/network.hpp)",
               {{"kind", choice("none, a fixed time per sync, or a collective's alpha-beta cost", "none",
                                {"none", "fixed", "ring", "tree", "ps"})},
                {"time", number("fixed: seconds per synchronisation", 0.0, 0)},
                {"latency", number("alpha: seconds per message", 1e-5, 0)},
                {"bandwidth", positive("beta: bytes per second", 1e9)}})},
       {"horizon",
        object("when a method stops: exactly one of time, epochs, updates",
               {{"time", optional(positive("virtual time", nullptr))},
                {"epochs", optional(positive("passes over the training set", nullptr))},
                {"updates", optional(integer("model updates", nullptr, 1))}})},
       {"eval_interval", required(positive("virtual time between evaluations (epochs for local_learning)", nullptr))},
       {"target",
        object("what 'reached' means in the table",
               {{"metric", string("metric name", "accuracy")},
                {"value", number("threshold", 0.85)},
                {"below", boolean("reached when the metric is <= value (losses, gradient norms)", false)}})},
       {"baseline", string("label of the method speed-ups are against (default: the first bsp "
                           "method, else the first)",
                           "")},
       {"checkpoint_every", integer("evaluations between checkpoints (0: none)", 0, 0)},
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
  const auto& params = algorithm_params();
  if (!a.is_string() || !params.count(a.get<std::string>()))
    fail(path + ".algorithm", common.fields[1].second, a);
  spec full = common;
  for (const auto& f : params.at(a.get<std::string>())) full.fields.push_back(f);
  return check_object(full, m, path);
}

double get_num(const json& j, const char* k, double d = 0) {
  return j.contains(k) && j.at(k).is_number() ? j.at(k).get<double>() : d;
}

void check_cross(json& c) {
  const std::size_t n = c["workers"]["count"].get<std::size_t>();
  const json& t = c["workers"]["time"];
  const std::string base = t["base"];
  if (base == "fixed" && t["tau"].size() != n)
    throw config_error("workers.time.tau", "expected " + std::to_string(n) +
                                               " times (one per worker), got " + std::to_string(t["tau"].size()));
  if (base == "speed_classes") {
    std::size_t total = 0;
    for (const auto& k : t["classes"]) total += k["count"].get<std::size_t>();
    if (total != n)
      throw config_error("workers.time.classes", "expected class counts summing to workers.count = " +
                                                     std::to_string(n) + ", got " + std::to_string(total));
  }
  if (base == "omnilearn") {
    const std::size_t want = t["mode"] == "bsp" ? 4 : 5;
    if (n != want)
      throw config_error("workers.count", "expected " + std::to_string(want) + " for the OmniLearn " +
                                              t["mode"].get<std::string>() + " presets, got " + std::to_string(n));
    if (t["levels"].empty())
      throw config_error("workers.time.levels", "expected at least one level");
  }
  if (t["subset_delay"]["count"].get<std::size_t>() > n)
    throw config_error("workers.time.subset_delay.count",
                       "expected at most workers.count = " + std::to_string(n));
  for (const char* key : {"outages", "slowdowns"}) {
    const json& ws = t[key];
    for (std::size_t i = 0; i < ws.size(); ++i) {
      const std::string p = std::string("workers.time.") + key + "[" + std::to_string(i) + "]";
      if (ws[i]["worker"].get<std::size_t>() >= n)
        throw config_error(p + ".worker", "expected a worker index < workers.count = " + std::to_string(n) +
                                              ", got " + ws[i]["worker"].dump());
      if (!(ws[i]["end"].get<double>() > ws[i]["begin"].get<double>()))
        throw config_error(p + ".end", "expected a time > begin (" + ws[i]["begin"].dump() + "), got " +
                                           ws[i]["end"].dump());
    }
  }
  const json& h = c["horizon"];
  const int set = h.contains("time") + h.contains("epochs") + h.contains("updates");
  if (set != 1)
    throw config_error("horizon", "expected exactly one of time, epochs, updates; got " + std::to_string(set));
  const json& d = c["data"];
  if (d["dataset"] == "scalar_quadratics" && d["centers"].size() != n)
    throw config_error("data.centers", "expected " + std::to_string(n) + " centers (one per worker), got " +
                                           std::to_string(d["centers"].size()));
  std::set<std::string> labels;
  bool has_bsp = false;
  for (std::size_t i = 0; i < c["methods"].size(); ++i) {
    json& m = c["methods"][i];
    const std::string p = "methods[" + std::to_string(i) + "]";
    const std::string label = m["label"];
    if (label.empty() || slug(label).empty())
      throw config_error(p + ".label", "expected a non-empty label with a letter or digit");
    if (!labels.insert(label).second)
      throw config_error(p + ".label", "expected a unique label, got a second \"" + label + "\"");
    const std::string a = m["algorithm"];
    has_bsp = has_bsp || a == "bsp";
    if (a == "omnilearn" && m["min_batch"].get<std::size_t>() > m["max_batch"].get<std::size_t>())
      throw config_error(p + ".min_batch", "expected <= max_batch (" + m["max_batch"].dump() + "), got " +
                                               m["min_batch"].dump());
    if ((a == "local_sgd" || a == "biased_local_sgd") && !m["local_steps"].empty() &&
        m["local_steps"].size() != n)
      throw config_error(p + ".local_steps", "expected " + std::to_string(n) +
                                                 " values (one per worker), got " + std::to_string(m["local_steps"].size()));
    if (a == "biased_local_sgd") {
      if (m["local_steps"].empty())
        throw config_error(p + ".local_steps", "missing; expected one H_i per worker");
      for (std::size_t j = 0; j < m["slow_workers"].size(); ++j)
        if (m["slow_workers"][j].get<std::size_t>() >= n)
          throw config_error(p + ".slow_workers[" + std::to_string(j) + "]",
                             "expected a worker index < workers.count = " + std::to_string(n));
    }
    if (a == "local_learning") {
      if (d["dataset"] != "fashion_mnist" || c["model"]["kind"] != "mlp")
        throw config_error(p + ".algorithm", "local_learning needs data.dataset \"fashion_mnist\" and model.kind \"mlp\"");
      const std::size_t layers = c["model"]["hidden"].size() + 1;
      if (m["modules"].get<std::size_t>() > layers)
        throw config_error(p + ".modules", "expected at most the number of dense layers (" +
                                               std::to_string(layers) + "), got " + m["modules"].dump());
    }
    // The method's optimizer: the experiment's, with the method's keys on top.
    json o = c["optimizer"];
    for (auto it = m["optimizer"].begin(); it != m["optimizer"].end(); ++it)
      if (!it.value().is_null()) o[it.key()] = it.value();
    m["optimizer"] = o;
    if (m["batch"].get<std::size_t>() == 0) m["batch"] = d["batch"];
  }
  if (c["runtime"] != "sim" && c["checkpoint_every"].get<std::uint64_t>() > 0)
    throw config_error("checkpoint_every", "expected 0 with runtime " + c["runtime"].dump() +
                                               ": checkpoints (and --resume from one) need runtime \"sim\" "
                                               "(the real runtimes' messages in flight are not saved)");
  std::string& b = c["baseline"].get_ref<std::string&>();
  if (!b.empty() && !labels.count(b))
    throw config_error("baseline", "expected the label of one of the methods, got \"" + b + "\"");
  if (b.empty()) {
    b = c["methods"][0]["label"];
    if (has_bsp)
      for (const auto& m : c["methods"])
        if (m["algorithm"] == "bsp") {
          b = m["label"];
          break;
        }
  }
  if (c["output"].get<std::string>().empty()) c["output"] = "out/" + c["name"].get<std::string>();
  if (c["workers"]["time"]["reference_batch"].get<std::size_t>() == 0)
    c["workers"]["time"]["reference_batch"] = d["batch"];
  (void)get_num;
}

void doc_rows(const spec& s, const std::string& path, std::string& out) {
  for (const auto& [k, f] : s.fields) {
    const std::string p = path.empty() ? k : path + "." + k;
    if (f.k == kind::object && !f.fields.empty()) {
      out += "| `" + p + "` | object | | " + f.doc + " |\n";
      doc_rows(f, p, out);
      continue;
    }
    std::string d = f.required ? "required" : (f.def.is_null() ? "" : f.def.dump());
    if (d.size() > 40) d = d.substr(0, 37) + "...";
    out += "| `" + p + "` | " + expected(f) + " | " + d + " | " + f.doc + " |\n";
  }
}

}  // namespace

std::vector<std::string> algorithm_names() {
  std::vector<std::string> v;
  for (const auto& [k, f] : algorithm_params()) v.push_back(k);
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
  for (std::size_t i = 0; i < methods.size(); ++i)
    out["methods"].push_back(check_method(methods[i], "methods[" + std::to_string(i) + "]"));
  check_cross(out);
  return out;
}

namespace {
// Splits "a.b[2].c" into {"a", "b", 2, "c"}.
std::vector<json> split_path(const std::string& p) {
  std::vector<json> parts;
  std::string cur;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char ch = p[i];
    if (ch == '.') {
      if (!cur.empty()) parts.emplace_back(cur);
      cur.clear();
    } else if (ch == '[') {
      if (!cur.empty()) parts.emplace_back(cur);
      cur.clear();
      const auto close = p.find(']', i);
      if (close == std::string::npos) throw config_error(p, "expected a closing ']' in the key path");
      const std::string idx = p.substr(i + 1, close - i - 1);
      if (idx.empty() || idx.find_first_not_of("0123456789") != std::string::npos)
        throw config_error(p, "expected an array index [N], got [" + idx + "]");
      parts.emplace_back(static_cast<std::size_t>(std::stoull(idx)));
      i = close;
    } else {
      cur += ch;
    }
  }
  if (!cur.empty()) parts.emplace_back(cur);
  if (parts.empty()) throw config_error(p, "expected a key path such as workers.count");
  return parts;
}
}  // namespace

void apply_override(json& doc, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw config_error(assignment, "expected an assignment key.path=value");
  const std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  json value = json::parse(text, nullptr, false);
  if (value.is_discarded()) value = text;
  const auto parts = split_path(path);
  json* cur = &doc;
  std::string sofar;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    if (parts[i].is_string()) {
      const std::string k = parts[i];
      sofar += (sofar.empty() ? "" : ".") + k;
      if (!cur->is_object() && !cur->is_null()) throw config_error(sofar, "is not an object");
      if (last) {
        (*cur)[k] = value;
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
        throw config_error(sofar, "expected an existing array element (array of " +
                                      std::to_string(cur->is_array() ? cur->size() : 0) + ")");
      if (last) (*cur)[idx] = value;
      else cur = &(*cur)[idx];
    }
  }
}

std::filesystem::path experiments_dir() {
  if (const char* e = std::getenv("HG_EXPERIMENTS_DIR")) return e;
  return std::filesystem::path(HG_SOURCE_DIR) / "examples" / "experiments";
}

std::vector<std::string> list_experiments() {
  std::vector<std::string> v;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(experiments_dir(), ec))
    if (e.path().extension() == ".json") v.push_back(e.path().stem().string());
  std::sort(v.begin(), v.end());
  return v;
}

json load_experiment(const std::string& name_or_path) {
  std::filesystem::path p = name_or_path;
  if (!std::filesystem::exists(p)) p = experiments_dir() / (name_or_path + ".json");
  std::ifstream in(p);
  if (!in) {
    std::string names;
    for (const auto& n : list_experiments()) names += " " + n;
    throw config_error("", "no file '" + name_or_path + "' and no named experiment of that name in " +
                               experiments_dir().string() + " (named:" + names + ")");
  }
  json j = json::parse(in, nullptr, false, /*ignore_comments=*/true);
  if (j.is_discarded()) throw config_error("", "'" + p.string() + "' is not valid JSON");
  return j;
}

std::string schema_markdown() {
  std::string out = "| key | expected | default | meaning |\n|---|---|---|---|\n";
  spec root = root_spec();
  doc_rows(root, "", out);
  out += "\nPer algorithm (keys of a method object next to `label`, `algorithm`, `optimizer`, `batch`):\n\n";
  for (const auto& [a, fields] : algorithm_params()) {
    out += "- `" + a + "`:";
    if (fields.empty()) out += " no hyper-parameters";
    for (const auto& [k, f] : fields) {
      out += " `" + k + "` (" + expected(f) + (f.def.is_null() ? "" : ", default " + f.def.dump()) + ")";
      if (&f != &fields.back().second) out += ";";
    }
    out += "\n";
  }
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
