// libFuzzer entry for the measured-trace parser (sim/worker_time.hpp, trace_replay::parse_csv,
// which heterograd-run reads real_jobs.csv with): any text either parses to rows that build a
// replay of finite, non-negative durations for the workers they name, or is refused with
// std::invalid_argument naming the trace's field -- never anything else.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>

#include "heterograd/sim/worker_time.hpp"

namespace sim = heterograd::sim;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const auto rows = sim::trace_replay::parse_csv(in);
    std::size_t workers = 0;
    for (const auto& r : rows) workers = std::max<std::size_t>(workers, std::size_t{r.worker} + 1);
    if (workers == 0 || workers > 4096) return 0;  // no rows, or too many workers to build
    const sim::trace_replay t(rows, workers, sim::replay_mode::start_time);
    for (std::size_t w = 0; w < workers; ++w) {
      const double d = t.duration(static_cast<sim::worker_id>(w), 0, 0.0, 1);
      if (!std::isfinite(d) || d < 0) std::abort();
    }
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).find("trace.") == std::string::npos) std::abort();
  }
  return 0;
}
