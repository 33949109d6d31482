#pragma once
// The algorithms heterograd-run runs, one row each: the name a method's "algorithm" gives, its
// family (which runner drives it), the method object's own keys (schema.hpp: a server's keys
// are its library config's described fields) and the factory that runs a method. The schema
// (config.cpp, --schema), the runners (run_common.cpp) and checkpointing all read the rows;
// nothing else names an algorithm.
//
// The built-in rows are one table (algorithms.hpp) read twice: with schema_binder for the
// keys (config.cpp, registry.cpp: no policy is instantiated there, so the configuration
// checker stays light enough for its fuzzer) and with the runner's binder for the factories
// (run_async.cpp). A row added at run time (add_algorithm: a policy written outside the
// driver, such as tests/driver/toy_row_test.cpp's) carries both halves itself; server_row()
// (runtimes.hpp) makes one from a policy type and its config.

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config.hpp"
#include "runners.hpp"
#include "schema.hpp"

namespace hgrun {

struct context;

/// Which runner drives an algorithm.
enum class family {
  server,  ///< an asynchronous server policy (runtime/server.hpp, the simulator's async runtime)
  round,   ///< a round method (algorithms/sync, balance/'s OmniLearn)
  local,   ///< decoupled local learning (algorithms/decoupled)
};

/// A method object's own keys (next to label, algorithm, optimizer, batch, nonfinite).
using method_keys = std::vector<std::pair<std::string, schema::spec>>;

/// Gradient computations one model update (one round of a round method) needs at least, and
/// the key that sets that count: (the resolved method object, its path "methods[i]", the
/// workers). The configuration's bound on work per update and per run reads it.
using work_rule = std::pair<double, std::string> (*)(const json& method, const std::string& path, double workers);
/// A method's own rules against the rest of the configuration (method_checks.hpp): the
/// resolved method object (its defaults may be settled here), the document, "methods[i]".
using method_check = void (*)(json& method, const json& config, const std::string& path);

/// One gradient per update (most server policies), set by the algorithm itself.
inline std::pair<double, std::string> one_gradient(const json&, const std::string& path, double) {
  return {1, path + ".algorithm"};
}
/// One gradient per worker and update (a synchronous round), set by workers.count.
inline std::pair<double, std::string> one_per_worker(const json&, const std::string&, double n) {
  return {n, "workers.count"};
}

struct algorithm_row {
  std::string name;
  family kind = family::server;
  method_keys keys;
  /// Runs one method of a resolved configuration: its summary (null on an MPI rank that
  /// writes nothing). Empty in the schema's copy of the built-in table.
  std::function<json(context&)> run;
  /// Whether the policy's whole state can be saved (a serialize(Archive&) member).
  bool checkpointable = false;
  /// A server policy built in float64 too (data.precision "float64").
  bool float64 = false;
  /// The library configs the method is built from: their descriptions' names (the prefixes
  /// of the library's errors, 'ringmaster_config.threshold', 'local_sgd.period'), the method
  /// keys their fields go by where the names differ (field, key), and the fields the driver
  /// sets from another section of the experiment (field, absolute key: a synchronisation's
  /// time comes from "network"), so that a library error names the key to change.
  std::vector<std::string> config_names;
  std::vector<std::pair<std::string, std::string>> renamed;
  std::vector<std::pair<std::string, std::string>> set_from;
  /// Gradients per update (the configuration's work bounds).
  work_rule gradients_per_update = one_gradient;
  /// The method's rules against the rest of the configuration (none: nullptr).
  method_check check = nullptr;
};

/// What a round method's or local learning's row holds beside its name and keys: where its
/// library errors come from (registry's config_names, renamed, set_from), its work per update,
/// and (the runner's binder only) how it runs and whether it checkpoints.
struct method_spec {
  std::vector<std::string> config_names;
  std::vector<std::pair<std::string, std::string>> renamed = {};
  std::vector<std::pair<std::string, std::string>> set_from = {};
  work_rule gradients_per_update = one_per_worker;
  method_check check = nullptr;
  method_runner runner = {};
};

/// Adds a row after the built-in ones (for every later resolve() and run_method()). Throws
/// std::invalid_argument when the name is taken or the row has no factory.
void add_algorithm(algorithm_row row);

/// Every algorithm's name and keys, built-in (by name) then added (what the schema knows).
const std::vector<algorithm_row>& algorithm_rows();

/// The rows add_algorithm added, in order.
const std::vector<algorithm_row>& added_algorithms();

/// The row of `name` with its factory (config_error naming methods[?].algorithm when there
/// is none: resolve() refused it already).
const algorithm_row& runnable_algorithm(const std::string& name);

/// The keys of a described config struct (core/describe.hpp) with the defaults in `d`, each
/// under its field's name unless `renamed` gives the key (field, key; "": not a key, the driver
/// sets the field), then `extra` (a key of the same name replaces the generated one: a count
/// that may be "inf").
template <heterograd::described S>
method_keys keys_of(const S& d, std::vector<std::pair<std::string, std::string>> renamed = {},
                    method_keys extra = {}) {
  method_keys out = schema::described_fields(d, renamed);
  for (auto& e : extra) {
    bool replaced = false;
    for (auto& k : out)
      if (k.first == e.first) {
        k.second = e.second;
        replaced = true;
      }
    if (!replaced) out.push_back(std::move(e));
  }
  return out;
}

/// A config struct with nothing to configure (vanilla ASGD, IA^2SGD, Ringleader).
struct no_config {
  static constexpr auto description() { return heterograd::describe("no_config"); }
};

/// The schema's binder of the built-in table: names, families and keys; no factory.
struct schema_binder {
  /// Family: the policy's type in each precision (Family::type<T>, Family::float64).
  template <class Family, class Config, class Make, class Report = std::nullptr_t>
  static algorithm_row server(std::string name, const Config& defaults,
                              std::vector<std::pair<std::string, std::string>> renamed,
                              method_keys extra, Make, Report = nullptr) {
    algorithm_row row{
        std::move(name), family::server, keys_of(defaults, renamed, std::move(extra)), {}, false};
    row.config_names = {std::string(Config::description().name)};
    row.renamed = std::move(renamed);
    row.float64 = Family::float64;
    return row;
  }
  /// No runner in the schema's copy (nothing of it is linked).
  template <class Runner>
  static method_runner runner() {
    return {};
  }
  static algorithm_row round(std::string name, method_keys keys, const method_spec& m) {
    return method_row(std::move(name), family::round, std::move(keys), m);
  }
  static algorithm_row local(std::string name, method_keys keys, const method_spec& m) {
    return method_row(std::move(name), family::local, std::move(keys), m);
  }
  static algorithm_row method_row(std::string name, family kind, method_keys keys, const method_spec& m) {
    algorithm_row row{std::move(name), kind, std::move(keys), {}, false};
    row.config_names = m.config_names;
    row.renamed = m.renamed;
    row.set_from = m.set_from;
    row.gradients_per_update = m.gradients_per_update;
    row.check = m.check;
    return row;
  }
};

/// `row` with its work per update set (a server whose update takes more than one gradient).
inline algorithm_row with_work(algorithm_row row, work_rule rule) {
  row.gradients_per_update = rule;
  return row;
}
/// `row` with its rules against the rest of the configuration.
inline algorithm_row with_check(algorithm_row row, method_check check) {
  row.check = check;
  return row;
}

}  // namespace hgrun
