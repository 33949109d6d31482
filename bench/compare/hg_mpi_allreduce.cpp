// heterograd's mpi transport: allreduce (sum) of floats, timed like the raw MPI peer, and
// optionally interleaved with raw MPI_Allreduce in the same process (see comm_mpi_harness.hpp).
//   hg_mpi_allreduce [PROGRAM ...]   each PROGRAM one interleaved entry (default: automatic):
//     raw        MPI_Allreduce(MPI_IN_PLACE) on MPI_COMM_WORLD (printed as raw_mpi)
//     automatic  the transport's default, deadline-honouring path (printed as hg_mpi)
//     native, ring, recursive_halving_doubling, tree   that algorithm (hg_mpi_<name>)
//     blocking   the opt-in blocking mode: timeout = comm::no_wait_limit, MPI_Allreduce; no
//                deadline (hg_mpi_blocking)
//   environment: HG_COMM_SIZES (comma-separated floats), and the tuning knobs below
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm_mpi_harness.hpp"
#include "heterograd/comm/mpi.hpp"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  namespace hc = heterograd::comm;
  {
    hc::mpi::communicator c(MPI_COMM_WORLD);
    // Tuning knobs (to measure the alternatives): HG_SEGMENT_BYTES (allreduce_options::
    // segment_bytes), HG_DOUBLING_MAX_BYTES, HG_RHD_MAX_BYTES, HG_NATIVE_MAX_BYTES,
    // HG_OVERSUBSCRIBED_{DOUBLING,NATIVE,TREE}_MAX_BYTES (the communicator's
    // mpi_allreduce_tuning).
    auto env = [](const char* k, std::size_t& v) {
      if (const char* x = std::getenv(k)) v = std::strtoull(x, nullptr, 10);
    };
    env("HG_DOUBLING_MAX_BYTES", c.tuning.doubling_max_bytes);
    env("HG_RHD_MAX_BYTES", c.tuning.rhd_max_bytes);
    env("HG_NATIVE_MAX_BYTES", c.tuning.native_max_bytes);
    env("HG_OVERSUBSCRIBED_DOUBLING_MAX_BYTES", c.tuning.oversubscribed_doubling_max_bytes);
    env("HG_OVERSUBSCRIBED_NATIVE_MAX_BYTES", c.tuning.oversubscribed_native_max_bytes);
    env("HG_OVERSUBSCRIBED_TREE_MAX_BYTES", c.tuning.oversubscribed_tree_max_bytes);
    std::vector<std::string> progs(argv + 1, argv + argc);
    if (progs.empty()) progs.push_back("automatic");
    std::vector<comm_peers::entry> entries;
    for (const std::string& a : progs) {
      if (a == "raw") {
        entries.push_back({"raw_mpi", [](std::vector<float>& b) {
                             MPI_Allreduce(MPI_IN_PLACE, b.data(), static_cast<int>(b.size()), MPI_FLOAT,
                                           MPI_SUM, MPI_COMM_WORLD);
                           }});
        continue;
      }
      hc::allreduce_options o;
      bool known = a == "blocking";
      if (known) o.timeout = hc::no_wait_limit;
      for (auto x : {hc::algorithm::automatic, hc::algorithm::native, hc::algorithm::ring,
                     hc::algorithm::recursive_halving_doubling, hc::algorithm::tree})
        if (a == hc::algorithm_name(x)) {
          o.algo = x;
          known = true;
        }
      if (!known) {
        std::fprintf(stderr, "hg_mpi_allreduce: unknown program '%s' (raw, automatic, native, ring, "
                             "recursive_halving_doubling, tree or blocking)\n", a.c_str());
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      env("HG_SEGMENT_BYTES", o.segment_bytes);
      entries.push_back({a == "automatic" ? "hg_mpi" : "hg_mpi_" + a,
                         [&c, o](std::vector<float>& b) { c.allreduce(heterograd::span<float>(b), o).wait(); }});
    }
    comm_peers::run(entries);
  }
  MPI_Finalize();
  return 0;
}
