// Ringmaster ASGD on 4 real threads on the wall clock, through runtime::run: an MLP on
// Fashion-MNIST; workers 2 and 3 three times slower than 0 and 1 (each job paced to a
// worker-time model); an evaluation every model second on a copy of the model while the
// workers go on; a checkpoint at every evaluation; the run report at the end.
//   hg-real-threads [--seconds S] [--dir D] [--resume]    (D holds checkpoint.bin)
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "heterograd/algorithms/async/ringmaster.hpp"
#include "heterograd/core/archive.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/data/idx.hpp"
#include "heterograd/nn/mlp.hpp"
#include "heterograd/runtime/run.hpp"

namespace hg = heterograd;
namespace hr = heterograd::runtime;
namespace ha = heterograd::algorithms::async;

int main(int argc, char** argv) try {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a line at a time, also into a file
  double seconds = 6;
  std::filesystem::path dir = ".";
  bool resume = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = std::stod(argv[++i]);
    else if (!std::strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
    else if (!std::strcmp(argv[i], "--resume")) resume = true;
    else throw std::invalid_argument(std::string("unknown argument ") + argv[i] + " (--seconds S, --dir D, --resume)");
  }
  const std::size_t workers = 4, batch = 32;
  const auto data = hg::data::load_fashion_mnist();
  const hg::nn::mlp<float> net({784, 64, 10});
  std::vector<float> x0(net.num_params());
  net.init(x0, 1);
  ha::ringmaster_asgd<float> policy(workers, ha::model_server<float>(x0, ha::plain_sgd(0.05)), {.threshold = 6});

  // Worker w's k-th job draws its batch from its own stream, from where a resumed run's cut left it.
  std::vector<hg::nn::mlp<float>> nets(workers, net);  // one scratch space per worker thread
  std::vector<std::uint64_t> first_job(workers, 0);
  auto gradient = [&](hr::worker_id w, std::uint64_t, std::uint64_t k, std::size_t b, hg::span<const float> x,
                      std::vector<float>& g) {
    const hg::counter_rng rng = hg::counter_rng(7, w);
    std::vector<float> xs;
    std::vector<std::int32_t> ys;
    for (std::size_t i = 0; i < b; ++i) {
      const auto r = rng.below((first_job[w] + k) * b + i, data.train.size());
      const auto row = data.train.row(r);
      xs.insert(xs.end(), row.begin(), row.end());
      ys.push_back(data.train.labels[r]);
    }
    g.resize(x.size());
    nets[w].loss_and_gradient(x, {hg::span<const float>(xs), hg::span<const std::int32_t>(ys)}, hg::span<float>(g));
  };
  hg::nn::mlp<float> judge = net;  // the evaluation's own scratch (it runs beside the workers)
  const hg::nn::batch<float> test{hg::span<const float>(data.test.features.data(), 2000 * 784),
                                  hg::span<const std::int32_t>(data.test.labels.data(), 2000)};

  hr::run_options o;
  o.real_scale = 0.01;  // a model second lasts 10 ms of wall time
  o.horizon = seconds / o.real_scale;
  o.eval_interval = 1 / o.real_scale;
  o.batch = batch;
  o.evaluate = [&](const hr::snapshot& s) {
    const auto e = judge.evaluate(s.params, test);
    std::printf("t = %5.2f s  updates %6llu  test accuracy %.3f\n", s.time * o.real_scale,
                static_cast<unsigned long long>(s.updates), e.accuracy());
    return std::vector<double>{e.loss(), e.accuracy()};
  };
  const auto file = dir / "checkpoint.bin";
  o.checkpoint.every = 1;
  o.checkpoint.write = [&](const std::vector<std::byte>& payload, const hr::cut_record& c) {
    const std::string sealed = hg::seal_checkpoint(payload);
    std::ofstream(dir / "checkpoint.tmp", std::ios::binary).write(sealed.data(), static_cast<std::streamsize>(sealed.size()));
    std::filesystem::rename(dir / "checkpoint.tmp", file);  // whole or not at all
    std::printf("checkpoint at version %llu (hash %016llx)\n", static_cast<unsigned long long>(c.version),
                static_cast<unsigned long long>(c.params_hash));
  };
  o.checkpoint.seek = [&](std::size_t w, std::uint64_t jobs, std::uint64_t) { first_job[w] = jobs; };
  if (resume && std::filesystem::exists(file)) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    o.checkpoint.resume = hg::open_checkpoint(file, bytes);
  }
  const hg::sim::fixed_times model({1.0, 1.0, 3.0, 3.0});  // model seconds a job takes, per worker
  const auto r = hr::run(hr::served{policy, gradient}, hr::where::threads{}, o, model);

  if (r.resumed_from)
    std::printf("resumed from version %llu (hash %016llx)\n", static_cast<unsigned long long>(r.resumed_from->version),
                static_cast<unsigned long long>(r.resumed_from->params_hash));
  std::printf("%llu updates in %.2f s; final test accuracy %.3f\n", static_cast<unsigned long long>(r.updates_done),
              r.wall_seconds, r.evaluations.back().values[1]);
  for (std::size_t w = 0; w < workers; ++w)
    std::printf("worker %zu: %llu results, compute %.2f s, paced %.2f s, mean staleness %.2f\n", w,
                static_cast<unsigned long long>(r.results[w]), r.workers[w].compute_seconds, r.workers[w].paced_seconds,
                r.mean_staleness[w]);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "hg-real-threads: %s\n", e.what());
  return 1;
}
