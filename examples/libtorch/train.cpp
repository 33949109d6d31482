// heterograd inside a LibTorch training loop: an MLP on Fashion-MNIST whose parameters and
// gradients live in two flat tensors, on which heterograd works in place (no copies).
//
//   --mode adam        heterograd's fused Adam step against torch::optim::Adam, the two
//                      models trained in lockstep from the same initial weights on the same
//                      batches: accuracy and time per epoch, the final accuracy gap, and the
//                      ratio of the optimizer step times (median over steps).
//   --mode local-sgd   local SGD (each rank its own replica and Adam state, averaged every
//                      --period steps) over --ranks in-process ranks (comm::inproc), or over
//                      MPI ranks with --transport mpi under mpirun.
//   --mode omnilearn   BSP with OmniLearn's dynamic batching (balance::omnilearn_bsp): the
//                      measured compute time of every rank sets its batch for the next epoch
//                      (global batch kept, gradients weighted b_i / B); rank --slow-rank is
//                      slowed artificially by --slow-factor (it sleeps (f - 1) x its compute).
//
//   --device cpu|cuda|auto   where the models train (auto: CUDA when LibTorch sees a GPU, the
//                      mode is adam and this build has the CUDA step; else the CPU). On CUDA
//                      the data, both models and heterograd's Adam state live on the GPU and
//                      heterograd's step runs on the CUDA tensors' memory in place, on the
//                      stream LibTorch computes on (fused_adam.hpp: the step on either device
//                      comes from one template; fused_adam_cuda.cu is its nvcc side). The
//                      distributed modes train on the CPU here: their device path is NCCL
//                      between GPUs (docs/sync.md), which this example does not set up.
//
// Exit status 0 when the final accuracy is at least --min-accuracy (and, in adam mode, within
// --max-gap-pp percentage points of LibTorch's Adam). docs/integration.md explains the binding
// of tensors to spans and the threading rules applied here.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif
#include <thrust/system/cpp/execution_policy.h>
#if defined(_OPENMP)
#include <thrust/system/omp/execution_policy.h>
#endif

#include "heterograd/algorithms/sync/workers.hpp"
#include "heterograd/balance/omnilearn.hpp"
#include "heterograd/comm/inproc.hpp"
#include "heterograd/core/execution.hpp"
#include "heterograd/core/rng.hpp"
#include "heterograd/core/span.hpp"
#include "heterograd/data/idx.hpp"
#include "heterograd/kernels/memory.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/torch/module.hpp"

#include "fused_adam.hpp"
#if defined(HG_HAS_MPI)
#include <mpi.h>

#include "heterograd/comm/mpi.hpp"
#endif


// OpenBLAS (LibTorch's BLAS on Debian) runs its own thread pool beside OpenMP; in-process
// ranks set it to one thread so that ranks, not BLAS threads, share the cores.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace hg = heterograd;
namespace ho = heterograd::optim;

namespace sync_api = heterograd::algorithms::sync;

namespace {

using wall = std::chrono::steady_clock;
double since(wall::time_point t0) {
  return std::chrono::duration<double>(wall::now() - t0).count();
}

// ---- options ----------------------------------------------------------------------------------

struct options {
  std::string mode = "adam";
  std::string device = "auto";
  std::string transport = "inproc";
  int ranks = 4;
  int epochs = 3;
  std::size_t train_subset = 0;  // 0: all 60000
  std::size_t test_subset = 0;   // 0: all 10000
  std::size_t batch = 64;        // per rank; omnilearn's global batch is batch * ranks
  double lr = 1e-3;
  std::size_t period = 8;
  int hidden = 128;
  int slow_rank = 1;
  double slow_factor = 3.0;
  std::size_t min_batch = 16;
  std::size_t max_batch = 0;     // 0: 2 * batch
  std::uint64_t seed = 1;
  double min_accuracy = 0.0;
  double max_gap_pp = 1.0;
  std::string data_dir;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "%s\nusage: hg-libtorch-train [--mode adam|local-sgd|omnilearn] [--device cpu|cuda|auto] "
               "[--transport inproc|mpi] [--ranks N] [--epochs E] [--train-subset N] "
               "[--test-subset N] [--batch B] [--lr LR] [--period H] [--hidden H] "
               "[--slow-rank R] [--slow-factor F] [--min-batch B] [--max-batch B] [--seed S] "
               "[--min-accuracy A] [--max-gap-pp P] [--data DIR]\n",
               why.c_str());
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") usage("heterograd in a LibTorch training loop");
    if (i + 1 >= argc) usage("missing value after " + a);
    const std::string v = argv[++i];
    try {
      if (a == "--mode") o.mode = v;
      else if (a == "--device") o.device = v;
      else if (a == "--transport") o.transport = v;
      else if (a == "--ranks") o.ranks = std::stoi(v);
      else if (a == "--epochs") o.epochs = std::stoi(v);
      else if (a == "--train-subset") o.train_subset = std::stoull(v);
      else if (a == "--test-subset") o.test_subset = std::stoull(v);
      else if (a == "--batch") o.batch = std::stoull(v);
      else if (a == "--lr") o.lr = std::stod(v);
      else if (a == "--period") o.period = std::stoull(v);
      else if (a == "--hidden") o.hidden = std::stoi(v);
      else if (a == "--slow-rank") o.slow_rank = std::stoi(v);
      else if (a == "--slow-factor") o.slow_factor = std::stod(v);
      else if (a == "--min-batch") o.min_batch = std::stoull(v);
      else if (a == "--max-batch") o.max_batch = std::stoull(v);
      else if (a == "--seed") o.seed = std::stoull(v);
      else if (a == "--min-accuracy") o.min_accuracy = std::stod(v);
      else if (a == "--max-gap-pp") o.max_gap_pp = std::stod(v);
      else if (a == "--data") o.data_dir = v;
      else usage("unknown option " + a);
    } catch (const std::logic_error&) {
      usage("bad value '" + v + "' for " + a);
    }
  }
  if (o.mode != "adam" && o.mode != "local-sgd" && o.mode != "omnilearn")
    usage("unknown mode " + o.mode);
  if (o.transport != "inproc" && o.transport != "mpi") usage("unknown transport " + o.transport);
  if (o.device != "cpu" && o.device != "cuda" && o.device != "auto")
    usage("unknown device " + o.device + " (cpu, cuda or auto)");
  if (o.device == "cuda" && o.mode != "adam")
    usage("--device cuda trains with --mode adam; " + o.mode +
          " runs on the CPU here (its device path is NCCL between GPUs, not set up by this example)");
  if (o.ranks < 1 || o.epochs < 1 || o.batch < 1 || o.period < 1 || o.hidden < 1 ||
      !(o.slow_factor >= 1.0))
    usage("ranks, epochs, batch, period, hidden must be >= 1 and slow-factor >= 1");
  if (o.max_batch == 0) o.max_batch = 2 * o.batch;
  return o;
}

// ---- device -------------------------------------------------------------------------------------

#if defined(HG_EXAMPLE_CUDA)
constexpr bool has_cuda_step = true;
#else
constexpr bool has_cuda_step = false;
#endif

/// Where --device puts the models: CUDA only when asked for (or auto) and possible.
torch::Device device_of(const options& o) {
  const bool gpu = torch::cuda::is_available();
  if (o.device == "cuda") {
    if (!has_cuda_step)
      throw std::runtime_error("--device cuda: this build has no CUDA step (fused_adam_cuda.cu is "
                               "built with -DHG_ENABLE_CUDA=ON against a LibTorch with CUDA)");
    if (!gpu) throw std::runtime_error("--device cuda: LibTorch sees no CUDA device");
  }
  const bool cuda = o.device == "cuda" || (o.device == "auto" && o.mode == "adam" && gpu && has_cuda_step);
  return cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

// ---- data ---------------------------------------------------------------------------------------

/// Fashion-MNIST as tensors over heterograd's loaded arrays (torch::from_blob: no copy).
struct fashion_mnist {
  hg::data::dataset train, test;
  torch::Tensor x_train, y_train, x_test, y_test;
};

std::shared_ptr<fashion_mnist> load_data(const options& o) {
  auto d = std::make_shared<fashion_mnist>();
  auto both = hg::data::load_fashion_mnist(o.data_dir);
  d->train = o.train_subset ? both.train.head(std::min(o.train_subset, both.train.size()))
                            : std::move(both.train);
  d->test = o.test_subset ? both.test.head(std::min(o.test_subset, both.test.size()))
                          : std::move(both.test);
  auto as_tensors = [](hg::data::dataset& s, torch::Tensor& x, torch::Tensor& y) {
    const auto n = static_cast<std::int64_t>(s.size()), dim = static_cast<std::int64_t>(s.dim);
    x = torch::from_blob(s.features.data(), {n, dim}, torch::kFloat);
    y = torch::from_blob(s.labels.data(), {n}, torch::kInt).to(torch::kLong);
  };
  as_tensors(d->train, d->x_train, d->y_train);
  as_tensors(d->test, d->x_test, d->y_test);
  return d;
}

/// The epoch's sample order: the same on every rank (a counter-based RNG of seed and epoch).
std::vector<std::int64_t> epoch_order(std::size_t n, std::uint64_t seed, int epoch) {
  std::vector<std::int64_t> order(n);
  std::iota(order.begin(), order.end(), std::int64_t{0});
  hg::counter_rng(seed, 0xe90c0000ull + static_cast<std::uint64_t>(epoch))
      .shuffle(order.begin(), order.end());
  return order;
}

torch::Tensor indices(const std::vector<std::int64_t>& order, std::size_t begin, std::size_t n,
                      const torch::Device& device = torch::kCPU) {
  const auto idx = torch::from_blob(const_cast<std::int64_t*>(order.data() + begin),
                                    {static_cast<std::int64_t>(n)}, torch::kLong);
  return device.is_cpu() ? idx : idx.to(device);
}

// ---- the model: parameters and gradients in two flat tensors --------------------------------

/// An MLP whose parameters are views into one flat tensor and whose gradients are views into
/// another (heterograd::libtorch::flat_module), so heterograd sees the whole model as two spans.
/// Autograd accumulates into the existing .grad tensors in place.
struct flat_mlp {
  torch::nn::Sequential net{nullptr};
  hg::libtorch::flat_module flat;
  torch::Tensor params, grads;  // the flat buffers as tensors

  hg::span<float> p() { return flat.params(); }  // host spans: the CPU model only
  hg::span<float> g() { return flat.grads(); }
};

flat_mlp make_mlp(int hidden, std::uint64_t seed, const torch::Device& device = torch::kCPU) {
  torch::manual_seed(seed);  // same seed, same initial weights (LibTorch's default init)
  auto net = torch::nn::Sequential(torch::nn::Linear(784, hidden), torch::nn::ReLU(),
                                   torch::nn::Linear(hidden, 10));
  net->to(device);  // before the flat buffers are laid: they are made on the module's device
  hg::libtorch::flat_module flat(net.ptr());
  auto params = flat.params_tensor(), grads = flat.grads_tensor();
  return flat_mlp{net, std::move(flat), params, grads};
}

/// Throws unless every parameter and its gradient still live in the flat tensors (a framework
/// that reallocated them would leave heterograd updating stale memory).
void check_binding(flat_mlp& m) { m.flat.check_binding(); }

/// Zeroes the gradients, runs forward and backward on one batch; returns the mean loss.
double forward_backward(flat_mlp& m, const torch::Tensor& x, const torch::Tensor& y) {
  m.grads.zero_();
  auto loss = torch::nn::functional::cross_entropy(m.net->forward(x), y);
  loss.backward();
  return loss.item<double>();
}

double accuracy(flat_mlp& m, const fashion_mnist& d) {
  torch::NoGradGuard no_grad;
  std::int64_t right = 0;
  const std::int64_t n = d.x_test.size(0), chunk = 2500;
  for (std::int64_t i = 0; i < n; i += chunk) {
    const auto k = std::min(chunk, n - i);
    auto pred = m.net->forward(d.x_test.narrow(0, i, k)).argmax(1);
    right += pred.eq(d.y_test.narrow(0, i, k)).sum().item<std::int64_t>();
  }
  return static_cast<double>(right) / static_cast<double>(n);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

void set_threads(int threads) {
#if defined(_OPENMP)
  omp_set_num_threads(threads);  // this thread's teams: LibTorch's and heterograd's kernels
#endif
  if (openblas_set_num_threads) openblas_set_num_threads(threads);
}

int cores() {
#if defined(_OPENMP)
  return omp_get_num_procs();
#else
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#endif
}

bool check(bool ok, const char* what) {
  std::printf("check: %s: %s\n", what, ok ? "ok" : "FAILED");
  return ok;
}

// ---- adam: heterograd's fused step against torch::optim::Adam -----------------------------

int run_adam(const options& o, fashion_mnist& d, const torch::Device& device) {
  const bool cuda = device.is_cuda();
  if (cuda) {  // the data on the GPU once; each batch is gathered there
    d.x_train = d.x_train.to(device);
    d.y_train = d.y_train.to(device);
    d.x_test = d.x_test.to(device);
    d.y_test = d.y_test.to(device);
  }
  flat_mlp a = make_mlp(o.hidden, o.seed, device), b = make_mlp(o.hidden, o.seed, device);
  if (!torch::equal(a.params, b.params)) throw std::runtime_error("replicas differ at start");
  std::printf("adam: MLP 784-%d-10 (%lld parameters) on %s, %zu training samples, batch %zu, "
              "lr %g, %d threads\n", o.hidden, static_cast<long long>(a.params.numel()),
              device.str().c_str(), d.train.size(), o.batch, o.lr, cores());

  // heterograd: one fused pass over the flat buffers (28 B/parameter), in place, the state in
  // the parameters' memory (fused_adam.hpp): host memory, or CUDA memory on LibTorch's stream.
  const auto n = static_cast<std::size_t>(a.params.numel());
  float* const ap = a.params.data_ptr<float>();
  const float* const ag = a.grads.data_ptr<float>();
  std::unique_ptr<hg_example::fused_step> hg_adam =
      cuda ? hg_example::make_cuda_adam(o.lr, n, /*LibTorch's default stream*/ nullptr)
           : std::make_unique<hg_example::adam_step<hg::kernels::host_memory>>(o.lr, n, hg::kernels::host_memory{});
  // Step times on a GPU: the queued kernels are waited for on both sides.
  const auto settle = [cuda] {
    if (cuda) torch::cuda::synchronize();
  };
  // LibTorch: its Adam over the same module parameters (per-tensor kernels).
  torch::optim::Adam torch_adam(b.net->parameters(), torch::optim::AdamOptions(o.lr));

  const std::size_t steps = d.train.size() / o.batch;
  std::vector<double> hg_steps, torch_steps;
  double acc_a = 0, acc_b = 0;
  for (int e = 0; e < o.epochs; ++e) {
    const auto order = epoch_order(d.train.size(), o.seed, e);
    double time_a = 0, time_b = 0, loss_a = 0, loss_b = 0;
    for (std::size_t s = 0; s < steps; ++s) {
      const auto idx = indices(order, s * o.batch, o.batch, device);
      const auto x = d.x_train.index_select(0, idx), y = d.y_train.index_select(0, idx);
      // Interleaved step by step, so that both see the same machine load.
      auto t0 = wall::now();
      loss_a += forward_backward(a, x, y);
      if (s == 0 && e == 0) check_binding(a);
      const auto t1 = wall::now();
      hg_adam->step(ap, ag);
      settle();
      const double step_a = since(t1);
      time_a += since(t0);
      t0 = wall::now();
      loss_b += forward_backward(b, x, y);
      const auto t2 = wall::now();
      torch_adam.step();
      settle();
      const double step_b = since(t2);
      time_b += since(t0);
      hg_steps.push_back(step_a);
      torch_steps.push_back(step_b);
    }
    acc_a = accuracy(a, d);
    acc_b = accuracy(b, d);
    std::printf("epoch %d  heterograd adam: loss %.4f acc %.2f%% %.2f s | torch::optim::Adam: "
                "loss %.4f acc %.2f%% %.2f s\n", e + 1, loss_a / steps, 100 * acc_a, time_a,
                loss_b / steps, 100 * acc_b, time_b);
  }
  const double ma = median(hg_steps), mb = median(torch_steps);
  const double gap = 100 * std::abs(acc_a - acc_b);
  std::printf("final accuracy: heterograd %.2f%%, torch %.2f%% (gap %.2f pp)\n", 100 * acc_a,
              100 * acc_b, gap);
  std::printf("optimizer step (median of %zu): heterograd %.1f us, torch %.1f us, "
              "ratio heterograd/torch %.3f\n", hg_steps.size(), 1e6 * ma, 1e6 * mb, ma / mb);
  bool ok = check(acc_a >= o.min_accuracy, "accuracy >= --min-accuracy");
  ok = check(gap <= o.max_gap_pp, "accuracy gap to torch::optim::Adam <= --max-gap-pp") && ok;
  return ok ? 0 : 1;
}

// ---- local SGD and OmniLearn over a transport --------------------------------------------

struct rank_result {
  double accuracy = 0;
  bool ok = true;
};

/// True when every rank's params equal rank 0's bitwise (elementwise max == min).
template <class Transport>
bool replicas_identical(const Transport& t, flat_mlp& m) {
  auto hi = m.params.clone(), lo = m.params.clone();
  hg::comm::allreduce_options o;
  o.op = hg::comm::reduce_op::max;
  t.allreduce(hg::span<float>(hi.data_ptr<float>(), hi.numel()), o).wait();
  o.op = hg::comm::reduce_op::min;
  t.allreduce(hg::span<float>(lo.data_ptr<float>(), lo.numel()), o).wait();
  return torch::equal(hi, lo);
}

/// Local SGD: each rank takes local Adam steps on its part of every epoch; every `period`
/// steps the sync layer's local_sgd_worker averages the replicas (collective).
template <class Exec, class Transport>
rank_result run_local_sgd(const Transport& t, flat_mlp& m, const fashion_mnist& d,
                          const options& o) {
  const auto r = static_cast<std::size_t>(t.rank()), R = static_cast<std::size_t>(t.size());
  const bool root = r == 0;
  sync_api::local_sgd_config cfg;
  cfg.period = o.period;
  sync_api::local_sgd_worker<float, ho::adam, Transport, sync_api::no_outer,
                             sync_api::identity_transform, hg::kernels::host_memory_on<Exec>>
      w(t, ho::adam({.lr = o.lr}), m.p(), std::vector<std::size_t>(R, o.batch), cfg);
  // Whole rounds per epoch, so the epoch ends on an average.
  const std::size_t steps = d.train.size() / (R * o.batch) / o.period * o.period;
  if (steps == 0) throw std::invalid_argument("too few samples for one round per epoch");
  if (root)
    std::printf("local-sgd: %zu ranks (%s), MLP 784-%d-10, batch %zu per rank, period H = %zu, "
                "%zu local steps per epoch, lr %g\n", R, o.transport.c_str(), o.hidden, o.batch,
                o.period, steps, o.lr);
  rank_result res;
  std::size_t syncs = 0;
  for (int e = 0; e < o.epochs; ++e) {
    const auto order = epoch_order(d.train.size(), o.seed, e);
    const auto t0 = wall::now();
    double loss = 0;
    for (std::size_t s = 0; s < steps; ++s) {
      const auto idx = indices(order, (s * R + r) * o.batch, o.batch);
      loss += forward_backward(m, d.x_train.index_select(0, idx), d.y_train.index_select(0, idx));
      if (s == 0 && e == 0) check_binding(m);
      syncs += w.step(m.p(), hg::span<const float>(m.g())) ? 1 : 0;
    }
    const double secs = since(t0);
    if (root) {
      res.accuracy = accuracy(m, d);
      std::printf("epoch %d  rank 0 loss %.4f  averaged model acc %.2f%%  %.2f s  (%zu averages)\n",
                  e + 1, loss / steps, 100 * res.accuracy, secs, syncs);
      std::fflush(stdout);
    }
  }
  const bool same = replicas_identical(t, m);
  if (root) {
    res.ok = check(same, "replicas identical after the last average") &&
             check(res.accuracy >= o.min_accuracy, "accuracy >= --min-accuracy");
  }
  return res;
}

/// BSP with OmniLearn's batch controller: per-rank batches b_i (sum B fixed), the sync layer's
/// bsp_worker aggregates sum_i (b_i / B) g_i, the controller moves the batches once per epoch
/// from the measured compute times.
template <class Exec, class Transport>
rank_result run_omnilearn(const Transport& t, flat_mlp& m, const fashion_mnist& d,
                          const options& o) {
  const auto r = static_cast<std::size_t>(t.rank()), R = static_cast<std::size_t>(t.size());
  const bool root = r == 0;
  const std::size_t B = o.batch * R;
  hg::balance::omnilearn_bsp ctrl(R, B, {.min_batch = o.min_batch, .max_batch = o.max_batch});
  std::vector<std::size_t> batches(ctrl.batch_sizes().begin(), ctrl.batch_sizes().end());
  sync_api::bsp_worker<float, ho::adam, Transport, sync_api::identity_transform,
                       hg::kernels::host_memory_on<Exec>>
      w(t, ho::adam({.lr = o.lr}), m.p(), batches);
  const std::size_t iters = d.train.size() / B;
  if (iters == 0) throw std::invalid_argument("too few samples for one global batch");
  const bool slowed = o.slow_rank >= 0 && static_cast<std::size_t>(o.slow_rank) == r;
  if (root)
    std::printf("omnilearn: %zu ranks (%s), global batch %zu, rank %d slowed %.1fx, "
                "%zu iterations per epoch, lr %g\n", R, o.transport.c_str(), B, o.slow_rank,
                o.slow_factor, iters, o.lr);
  rank_result res;
  for (int e = 0; e < o.epochs; ++e) {
    const auto order = epoch_order(d.train.size(), o.seed, e);
    const std::size_t offset = std::accumulate(batches.begin(), batches.begin() + r, std::size_t{0});
    const std::size_t mine = batches[r];
    double compute = 0;
    const auto t0 = wall::now();
    for (std::size_t k = 0; k < iters; ++k) {
      const auto idx = indices(order, k * B + offset, mine);
      const auto c0 = wall::now();
      forward_backward(m, d.x_train.index_select(0, idx), d.y_train.index_select(0, idx));
      if (k == 0 && e == 0) check_binding(m);
      if (slowed)  // the artificial slowdown: this rank computes slow_factor times slower
        std::this_thread::sleep_for(std::chrono::duration<double>((o.slow_factor - 1) * since(c0)));
      compute += since(c0);
      w.step(m.p(), m.g());  // weighted gradient allreduce + fused Adam
    }
    const double secs = since(t0);
    // Every rank's (samples, iterations, compute seconds), so every rank runs the same
    // controller on the same numbers and reaches the same batches.
    const double me[3] = {static_cast<double>(mine * iters), static_cast<double>(iters), compute};
    std::vector<double> all(3 * R);
    t.allgather(hg::span<const double>(me, 3), hg::span<double>(all)).wait();
    for (std::size_t i = 0; i < R; ++i)
      ctrl.observe(i, {.samples = static_cast<std::size_t>(all[3 * i]),
                       .iterations = static_cast<std::size_t>(all[3 * i + 1]),
                       .compute_time = hg::seconds(all[3 * i + 2])});
    const auto before = batches;
    if (ctrl.rebalance()) {
      batches.assign(ctrl.batch_sizes().begin(), ctrl.batch_sizes().end());
      w.set_batches(batches);
    }
    if (root) {
      res.accuracy = accuracy(m, d);
      std::string line;
      for (std::size_t i = 0; i < R; ++i) {
        char cell[64];
        std::snprintf(cell, sizeof cell, " %zu (%.1f ms)", before[i], 1e3 * all[3 * i + 2] / iters);
        line += cell;
      }
      std::string next;
      for (auto b : batches) next += " " + std::to_string(b);
      std::printf("epoch %d  acc %.2f%%  %.2f s  batch (compute per iteration):%s -> next:%s\n", e + 1,
                  100 * res.accuracy, secs, line.c_str(), next.c_str());
      std::fflush(stdout);
    }
  }
  const bool same = replicas_identical(t, m);
  if (root)
    res.ok = check(same, "replicas identical (every rank applied the same aggregate)") &&
             check(res.accuracy >= o.min_accuracy, "accuracy >= --min-accuracy");
  return res;
}

template <class Exec, class Transport>
rank_result run_distributed(const Transport& t, flat_mlp& m, const fashion_mnist& d,
                            const options& o) {
  return o.mode == "local-sgd" ? run_local_sgd<Exec>(t, m, d, o) : run_omnilearn<Exec>(t, m, d, o);
}

/// In-process ranks: threads of this process share its cores. Each rank thread gets
/// cores / ranks OpenMP threads (at least 1) and steps with the sequential policy, so the
/// process runs one team's worth of threads in all, not a team per rank.
int run_inproc(const options& o, const fashion_mnist& d) {
  std::vector<flat_mlp> models;
  for (int i = 0; i < o.ranks; ++i) models.push_back(make_mlp(o.hidden, o.seed));  // equal
  const int per_rank = std::max(1, cores() / o.ranks);
  if (openblas_set_num_threads) openblas_set_num_threads(1);
  rank_result root;
  using cpp_exec = std::remove_cvref_t<decltype(thrust::cpp::par)>;
  hg::comm::inproc::spawn(o.ranks, [&](hg::comm::inproc::communicator c) {
    set_threads(per_rank);
    auto res = run_distributed<cpp_exec>(c, models[static_cast<std::size_t>(c.rank())], d, o);
    if (c.rank() == 0) root = res;
  });
  return root.ok ? 0 : 1;
}

#if defined(HG_HAS_MPI)
/// MPI ranks: one process per rank, each with one OpenMP team of cores / (ranks on this node)
/// threads, used by LibTorch and by heterograd's steps (omp policy).
int run_mpi(int& argc, char**& argv, const options& o) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int code = 0;
  {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int local = 1;
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
    set_threads(std::max(1, cores() / local));
    hg::comm::mpi::communicator c(MPI_COMM_WORLD);
    try {
      const auto d = load_data(o);
      flat_mlp m = make_mlp(o.hidden, o.seed);  // the same seed on every rank: equal replicas
#if defined(_OPENMP)
      using exec = std::remove_cvref_t<decltype(thrust::omp::par)>;
#else
      using exec = std::remove_cvref_t<decltype(thrust::cpp::par)>;
#endif
      const auto res = run_distributed<exec>(c, m, *d, o);
      code = c.rank() == 0 && !res.ok ? 1 : 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s\n", c.rank(), e.what());
      c.abort(e.what());
      code = 1;
    }
    int worst = 0;
    MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    code = worst;
  }
  MPI_Finalize();
  return code;
}
#endif

}  // namespace

#if !defined(HG_EXAMPLE_CUDA)
// A build without fused_adam_cuda.cu (no nvcc, or a LibTorch without CUDA): --device cuda is
// refused before this is reached (device_of); defining it keeps one code path compiled.
std::unique_ptr<hg_example::fused_step> hg_example::make_cuda_adam(double, std::size_t, void*) {
  throw std::runtime_error("this build of hg-libtorch-train has no CUDA step");
}
#endif

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  try {
    if (o.transport == "mpi") {
#if defined(HG_HAS_MPI)
      if (o.mode == "adam") usage("--transport mpi needs --mode local-sgd or omnilearn");
      return run_mpi(argc, argv, o);
#else
      usage("this build has no MPI");
#endif
    }
    const torch::Device device = device_of(o);
    const auto d = load_data(o);
    return o.mode == "adam" ? run_adam(o, *d, device) : run_inproc(o, *d);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hg-libtorch-train: %s\n", e.what());
    return 1;
  }
}
