#pragma once
// heterograd-run's stages (main.cpp drives them): the units of a run (one method on one seed,
// in its own folder), run in this process or as child processes of --jobs N that report
// their progress through a file, the folders checked before anything is written, and the MPI
// session of runtime "mpi". sim_vs_real.cpp writes a real-clock run's comparison with its
// prediction.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "config.hpp"
#include "mpi_world.hpp"
#include "report.hpp"

namespace hgrun {

struct unit {
  std::size_t method;
  std::uint64_t seed;
  std::filesystem::path dir;
};

// Some run of a stage failed (each failure was reported as it happened).
struct run_failed {};

// What every stage of a run shares.
struct stage_options {
  unsigned jobs = 1;
  bool resume = false, quiet = false, writer = true;
  std::uint64_t halt_after = 0;
  std::string metric;
};

// A stage of a run: the tuning runs of a sweep, or the runs the table reports. `resolved` is
// what its runs read (its config.json); `failed[i]` says why unit i failed ("" when it did not).
struct stage {
  std::string name;
  json resolved;
  std::filesystem::path root;
  std::vector<std::uint64_t> seeds;
  std::vector<unit> units;
  std::vector<std::string> failed;
  int halts = 0;
};

/// Before MPI is initialised, the launcher's environment says which rank this is.
int launcher_rank();
/// The source tree's git revision ("-dirty" when it has changes; "unknown" outside git).
std::string git_revision();
/// A child of --jobs N dies with its parent (false: the parent is gone already).
bool follow_parent(long parent);
/// A child process's run of one unit (--child): 0, or 3 when halted (--halt-after).
int child_main(const std::string& config_path, std::size_t method, std::uint64_t seed, const std::string& dir,
               bool resume, std::uint64_t halt_after);
/// The units of a configuration's methods on each seed, each in its folder under root.
std::vector<unit> make_units(const json& cfg, const std::vector<std::uint64_t>& seeds, const std::filesystem::path& root);
/// Refuses a stage whose folders include one that heterograd-run did not make (nothing touched).
void check_stage_folders(const stage& st);
/// Removes what an earlier run wrote into root (its own files and folders only).
void clear_earlier_outputs(const std::filesystem::path& root);
/// Runs a stage's units; `tolerate`: a failed unit is recorded, not thrown (run_failed).
void run_stage(stage& st, const stage_options& o, bool tolerate);
/// The summaries of a stage's runs, per method with their seeds.
std::vector<std::vector<method_result>> stage_results(const stage& st);
/// clock "real": each run's prediction by the simulator and sim_vs_real.md.
void write_sim_vs_real(const json& resolved, const std::vector<unit>& units, const std::filesystem::path& root);

}  // namespace hgrun
