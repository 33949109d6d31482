#pragma once
// The experiment configuration of heterograd-run: a JSON document checked against one schema
// (every key, its type, its range and its default), resolved into a complete document with
// every default filled in. Errors name the key path (`methods[2].threshold`) and the
// expected form, and are raised before anything runs.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace hgrun {

using json = nlohmann::json;

/// A configuration that is not well formed: `path` is the key path, `expected` the form.
class config_error : public std::invalid_argument {
 public:
  config_error(std::string path, const std::string& message)
      : std::invalid_argument("config error at '" + (path.empty() ? std::string("<root>") : path) +
                              "': " + message),
        path_(std::move(path)) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// Limits on what a configuration may ask for. They make every run bounded: a configuration
/// beyond them is refused before anything runs, naming the key.
inline constexpr std::size_t max_config_depth = 64;            ///< nesting of objects and arrays
inline constexpr std::size_t max_config_bytes = 16u << 20;     ///< a configuration file
inline constexpr double max_evaluations = 1e6;                 ///< evaluations of one run
inline constexpr double max_gradients = 1e9;                   ///< gradient computations of one run
inline constexpr std::size_t max_slug_bytes = 96;              ///< a method's folder name
inline constexpr std::size_t max_thread_workers = 1024;        ///< workers.count with runtime "threads"
/// An integer key's largest value unless its rule says less (counts stay exact in a double).
inline constexpr double max_config_integer = 1e15;
/// A seed's largest value, wherever it enters (seed, seeds, tuning.seeds, --seed, --seeds) or
/// is derived (the default tuning seed): max_config_integer, so that no seed wraps.
inline constexpr std::uint64_t max_seed = static_cast<std::uint64_t>(max_config_integer);

/// Parses configuration text (comments allowed): nesting deeper than max_config_depth and an
/// object with two equal keys are config_errors naming the key path, as is text that is not
/// JSON (naming `source` and the byte).
json parse_config(std::string_view text, const std::string& source);

/// The physical memory of this machine in bytes (what a configuration's estimate is held to).
double physical_memory_bytes();

/// The config_error for a library's std::invalid_argument ("heterograd: invalid argument
/// 'partition_iid.n' = ...") met while setting up or running `config`: the key the library's
/// parameter comes from, the value and the rule, in the configuration's terms. `method` is the
/// method being run, when known; `fallback` the key named when the parameter is not one the
/// configuration sets.
config_error from_library_error(const std::invalid_argument& e, const json& config, long method,
                                const std::string& fallback);

/// Every algorithm the driver can run.
std::vector<std::string> algorithm_names();

/// Checks `raw` against the schema and returns it with every default filled in. Throws
/// config_error naming the first offending key path and the expected form.
json resolve(const json& raw);

/// Applies one `key.path[2].name=value` assignment to `doc` (value parsed as JSON when it is
/// JSON, else taken as a string). The path must name a key the schema knows; checking the
/// value is resolve()'s job.
void apply_override(json& doc, const std::string& assignment);

/// Sets the key at `path` ("optimizer.lr", "classes[1].count") of `doc` to `value`, making
/// missing objects on the way; an array element must exist. Errors name `error_key` when it is
/// given, else the path.
void set_key(json& doc, const std::string& path, json value, const std::string& error_key);

/// --methods: keeps the methods of `raw` whose label, or its folder name (slug()), is one of the
/// comma-separated `names`, in the experiment's order, and drops a baseline left out (resolve()
/// then picks one). A name that matches no method is a config_error naming "--methods", the
/// name and the methods' labels.
void select_methods(json& raw, const std::string& names);

/// A JSON file by path, or a named experiment from the experiments directory (HG_EXPERIMENTS_DIR,
/// else the source tree's examples/experiments).
json load_experiment(const std::string& name_or_path);
std::filesystem::path experiments_dir();
std::vector<std::string> list_experiments();

/// The schema as Markdown (key, type and range, default, meaning): `heterograd-run --schema`.
std::string schema_markdown();

/// The schema as a JSON Schema (draft 2020-12) of an experiment file: `heterograd-run
/// --schema=json`. Methods are one branch per algorithm (if algorithm is ... then its keys).
json schema_json();

/// A file-system-friendly name for a method label.
std::string slug(const std::string& label);

}  // namespace hgrun
