// The models suite's MPI figure (bench/compare/models_peers.sh runs it under mpirun -np 2):
// heterograd's local SGD on a LibTorch preset over MPI ranks, timed as torch_ddp.py times
// PyTorch's DDP on Gloo -- one thread a rank, batch 32 a rank, the same batches, momentum SGD,
// a warm-up, then a fixed number of steps between two barriers.
//
//   mpirun -np R hg-bench-models-torch-mpi PRESET PERIOD     PRESET 0 LeNet-5, 1 ResNet-8
//
// Rank 0 prints one JSON object: preset, period, ranks, samples_per_second, and its model's
// test accuracy (the replicas' average at the last round) after `samples` samples in all.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "heterograd/algorithms/sync/workers.hpp"
#include "heterograd/comm/mpi.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/torch/module.hpp"
#include "../torch_presets.hpp"

int main(int argc, char** argv) {
  namespace hb = hg_bench_torch;
  namespace hg = heterograd;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int code = 0;
  {
    hg::comm::mpi::communicator c(MPI_COMM_WORLD);
    try {
      if (argc != 3) throw std::invalid_argument("usage: hg-bench-models-torch-mpi PRESET(0|1) PERIOD(>=1)");
      const long preset = std::strtol(argv[1], nullptr, 10), period = std::strtol(argv[2], nullptr, 10);
      if ((preset != 0 && preset != 1) || period < 1)
        throw std::invalid_argument("expected PRESET 0 or 1 and PERIOD >= 1, got " + std::string(argv[1]) + " " + argv[2]);
      hb::one_thread();
      const auto R = static_cast<std::size_t>(c.size()), r = static_cast<std::size_t>(c.rank());
      (void)hb::train();
      hg::libtorch::flat_module m(hb::make(preset).ptr());
      auto& net = dynamic_cast<torch::nn::SequentialImpl&>(m.module());
      hg::algorithms::sync::local_sgd_config cfg;
      cfg.period = static_cast<std::size_t>(period);
      hg::algorithms::sync::local_sgd_worker<float, hg::optim::momentum, hg::comm::mpi::communicator> w(
          c, hg::optim::momentum({.lr = hb::lr, .momentum = hb::momentum}), m.params(),
          std::vector<std::size_t>(R, static_cast<std::size_t>(hb::batch)), cfg);
      // About 2 s timed (as torch_ddp.py): LeNet-5's steps take 2 ms, ResNet-8's 20 ms. Multiples
      // of 8 and 1: whole rounds.
      const std::size_t warmup = 16, steps = preset == 0 ? 960 : 96;
      auto step = [&](std::size_t s) {
        const auto [x, y] = hb::batch_of(preset, s, r, R);
        m.zero_grad();
        hb::loss_of(net, x, y).backward();
        (void)w.step(m.params(), m.grads());
      };
      for (std::size_t s = 0; s < warmup; ++s) step(s);
      c.barrier().wait();
      const auto t0 = std::chrono::steady_clock::now();
      for (std::size_t s = warmup; s < warmup + steps; ++s) step(s);
      c.barrier().wait();
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r == 0)
        std::printf("{\"preset\": \"%s\", \"period\": %ld, \"ranks\": %zu, \"samples_per_second\": %.3f, "
                    "\"samples\": %zu, \"accuracy\": %.4f}\n",
                    hb::preset_name(preset), period, R, static_cast<double>(R * steps * hb::batch) / secs,
                    R * (warmup + steps) * static_cast<std::size_t>(hb::batch), hb::accuracy(net));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s\n", c.rank(), e.what());
      code = 1;
    }
    int worst = 0;
    MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    code = worst;
  }
  MPI_Finalize();
  return code;
}
