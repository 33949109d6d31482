// heterograd-run's experiment schema (every section's keys, kinds, ranges and defaults; an
// algorithm's keys come from its registry row), the resolver that checks a document against it,
// and the schema as Markdown (--schema) and as JSON Schema (--schema=json).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "config_detail.hpp"
#include "experiment.hpp"
#include "files.hpp"
#include "heterograd/data/synthetic.hpp"
#include "heterograd/runtime/pacing.hpp"
#include "heterograd/runtime/placement.hpp"
#include "optimizer.hpp"
#include "registry.hpp"
#include "schema.hpp"

namespace hgrun {

namespace {

using namespace schema;
using config_detail::applies_text;
using config_detail::check_applies;
using config_detail::check_object;
using config_detail::expected;
using config_detail::fail;
using config_detail::fmt;
using config_detail::row_of;
using config_detail::shown;
constexpr double inf = std::numeric_limits<double>::infinity();

}  // namespace

namespace {

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
                                                   string("cpulist", nullptr), json::array())},
                               {"server_placement",
                                string("clock real, runtime threads: the CPU cores the server thread of a server "
                                       "method runs on, a cpulist (\"0\"; \"\": not pinned); round methods have "
                                       "no server thread and run without it",
                                       "")}})},
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

}  // namespace hgrun
