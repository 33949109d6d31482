// heterograd's mpi transport: allreduce (sum) of floats, timed like the raw MPI peer.
//   hg_mpi_allreduce [algorithm]   automatic (default), native, ring, recursive_halving_doubling,
//                                  tree, or blocking (the opt-in blocking mode: timeout =
//                                  comm::no_wait_limit, MPI_Allreduce; no deadline)
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
    hc::allreduce_options o;
    std::string name = "hg_mpi";
    if (argc > 1) {
      const std::string a = argv[1];
      if (a == "blocking") o.timeout = hc::no_wait_limit;
      for (auto x : {hc::algorithm::automatic, hc::algorithm::native, hc::algorithm::ring,
                     hc::algorithm::recursive_halving_doubling, hc::algorithm::tree})
        if (a == hc::algorithm_name(x)) o.algo = x;
      name += "_" + a;
    }
    // Tuning knobs (to measure the alternatives): HG_SEGMENT_BYTES (allreduce_options::
    // segment_bytes), HG_DOUBLING_MAX_BYTES, HG_RHD_MAX_BYTES, HG_NATIVE_MAX_BYTES (the
    // communicator's mpi_allreduce_tuning).
    auto env = [](const char* k, std::size_t& v) {
      if (const char* x = std::getenv(k)) v = std::strtoull(x, nullptr, 10);
    };
    env("HG_SEGMENT_BYTES", o.segment_bytes);
    env("HG_DOUBLING_MAX_BYTES", c.tuning.doubling_max_bytes);
    env("HG_RHD_MAX_BYTES", c.tuning.rhd_max_bytes);
    env("HG_NATIVE_MAX_BYTES", c.tuning.native_max_bytes);
    comm_peers::run(name.c_str(), [&](std::vector<float>& b) {
      c.allreduce(heterograd::span<float>(b), o).wait();
    });
  }
  MPI_Finalize();
  return 0;
}
