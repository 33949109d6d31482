// Compiled by nvcc in every build that has it (test cuda_compile_device_paths; never run):
// instantiates the device code of the mixed-precision, capturable and loss-scaled optimizer
// paths, of every asynchronous server policy on device memory (kernels::thrust_memory on a
// CUDA stream) and of the synchronous family's per-rank helpers on device memory over NCCL
// (when the build has it) and of decoupled local learning on device memory, for the CUDA system, which the header check cannot (templates are compiled
// only where they are used), and the LibTorch example's CUDA step (examples/libtorch/
// fused_adam_cuda.cu, included at the end: its own build needs a LibTorch with CUDA). The CUDA
// twins of kernels_test and optim_test run the optimizer paths on a GPU.
#include <span>
#include <vector>

#include <thrust/device_vector.h>

#include "heterograd/algorithms/async.hpp"
#include "heterograd/algorithms/decoupled/local_learning.hpp"
#include "heterograd/algorithms/decoupled/pipeline.hpp"
#include "heterograd/algorithms/decoupled/transport_pipeline.hpp"
#include "heterograd/algorithms/sync.hpp"
#include "heterograd/comm/inproc_partial.hpp"
#include "heterograd/core/archive.hpp"
#if defined(HG_HAS_NCCL)
#include "heterograd/comm/nccl.cuh"
#endif
#include "heterograd/kernels/capturable.hpp"
#include "heterograd/kernels/thrust_memory.hpp"
#include "heterograd/optim.hpp"
#include "heterograd/runtime/concepts.hpp"
#include "heterograd/testing/runtime_archetypes.hpp"

namespace hg = heterograd;
namespace hk = heterograd::kernels;
namespace ho = heterograd::optim;

template <class Opt, class P, class G>
void step(const Opt& opt, std::size_t n) {
  const auto pol = thrust::cuda::par_nosync;
  thrust::device_vector<P> p(n);
  thrust::device_vector<G> g(n);
  auto st = opt.init(pol, p);
  opt.update(pol, g, st, p);
}

template <class Opt>
void every_path(const Opt& opt) {
  step<Opt, float, float>(opt, 8);
  step<Opt, hk::bf16, hk::bf16>(opt, 8);
  step<Opt, hk::fp16, float>(opt, 8);
  const auto c = ho::capturable(opt);
  step<decltype(c), float, float>(c, 8);
  step<decltype(c), double, double>(c, 8);
  step<decltype(c), hk::bf16, hk::bf16>(c, 8);
  const auto s = ho::dynamic_loss_scale(c);
  step<decltype(s), hk::fp16, hk::fp16>(s, 8);
  step<decltype(s), float, float>(s, 8);
}

namespace ha = heterograd::algorithms::async;


template <class P>
void arrive(P&& p) {
  heterograd::testing::async_control_archetype c;  // asks for nothing: compiled, not run
  thrust::device_vector<float> g(p.dim());
  p.on_arrival(c, heterograd::runtime::arrival{0, 0, 0, 0.0, 1.0}, g);
  p.on_arrival(c, heterograd::runtime::arrival{0, 0, 0, 0.0, 1.0},
               hg::span<const float, hg::device_space>(hg::make_span(g)));
}

void async_servers_on_device(cudaStream_t stream) {
  const auto mem = hk::thrust_memory(thrust::cuda::par.on(stream));
  using M = std::remove_const_t<decltype(mem)>;
  auto srv = [&](ha::nonfinite_policy nf = ha::nonfinite_policy::fail) {
    return ha::model_server<float, ho::sgd, M>(std::vector<float>(8, 0.0f), ha::plain_sgd(0.1), nf, mem);
  };
  arrive(ha::asgd(2, ha::model_server<float, ho::adam, M>(std::vector<float>(8), ho::adam(),
                                                          ha::nonfinite_policy::zero, mem)));
  arrive(ha::asgd(2, srv(ha::nonfinite_policy::skip)));
  arrive(ha::delay_adaptive_asgd(2, srv()));
  arrive(ha::staleness_scaled_asgd(2, srv()));
  arrive(ha::ringmaster_asgd(2, srv()));
  arrive(ha::rennala_sgd(2, srv()));
  arrive(ha::rescaled_asgd(2, srv()));
  arrive(ha::ia2sgd(2, srv()));
  arrive(ha::malenia_sgd(2, srv()));
  arrive(ha::ringleader_asgd(2, srv()));
  arrive(ha::ssp_server(2, srv()));
  arrive(ha::dssp_server(2, srv()));
  arrive(ha::dc_asgd(2, srv()));
  arrive(ha::dc_asgd(2, srv(), {.adaptive = true}));
  arrive(ha::fedbuff(2, srv()));
  arrive(ha::naive_optimal_asgd(2, srv(), {.tau = {1, 2}}));
  arrive(ha::omnilearn_asgd(2, srv(), {32, 32}));
}

namespace hs = heterograd::algorithms::sync;

// eager-SGD on device memory: its rounds staged through the inproc partial allreduce's host
// buffers (compiled, never called: a partial allreduce needs its ranks).
void eager_worker_on_device(cudaStream_t stream, const hg::comm::inproc::partial_allreduce<float>& part) {
  const auto mem = hk::thrust_memory(thrust::cuda::par.on(stream));
  using M = std::remove_const_t<decltype(mem)>;
  thrust::device_vector<float> p(8), g(8);
  const hg::span<float, hg::device_space> ps = hg::make_span(p), gs = hg::make_span(g);
  hs::eager_worker<float, ho::adam, hg::comm::inproc::partial_allreduce<float>, M> w(part, ho::adam(), ps,
                                                                                     {}, mem);
  w.step(ps, gs);
  w.final_step(ps, gs);
}

namespace dc = heterograd::algorithms::decoupled;

// A chain of two modules computing in device memory (a stand-in for a model on the GPU: it
// writes no gradient). local_learning keeps every buffer in the memory, the steppers update
// them on the caller's stream.
struct device_chain {
  using memory_space = hg::device_space;
  using dspan = hg::span<float, hg::device_space>;
  thrust::device_vector<float> out = thrust::device_vector<float>(8);
  std::size_t modules() const { return 2; }
  std::size_t num_params() const { return 8; }
  std::size_t module_offset(std::size_t k) const { return 4 * k; }
  std::size_t input_width(std::size_t) const { return 1; }
  std::size_t head_size(std::size_t) const { return 2; }
  void init_head(std::size_t, dspan, std::uint64_t) {}
  dc::basic_module_step<hg::device_space> local_gradient(std::size_t, dspan, const float*, hg::span<const std::int32_t> y,
                                                         dspan, dspan, dspan) {
    return {0.0f, hg::span<const float, hg::device_space>(thrust::raw_pointer_cast(out.data()), y.size())};
  }
  float global_gradient(dspan, const float*, hg::span<const std::int32_t>, dspan) { return 0.0f; }
};

template <class O, class C, class M>
concept buildable = requires { typename dc::local_learning<O, C, M>; };

void decoupled_on_device(cudaStream_t stream) {
  const auto mem = hk::thrust_memory(thrust::cuda::par.on(stream));
  using M = std::remove_const_t<decltype(mem)>;
  using S = dc::optim_stepper<ho::adam, M>;
  static_assert(buildable<S, device_chain, M>);
  static_assert(!buildable<S, dc::mlp_chain, M>, "a host chain over device buffers is refused");
  static_assert(!buildable<dc::optim_stepper<ho::adam>, device_chain, M>,
                "a host stepper over device buffers is refused");
  static_assert(!buildable<S, device_chain, hk::serial_host_memory>, "a device chain over host buffers is refused");
  dc::local_learning<S, device_chain, M> ll(device_chain{}, std::vector<float>(8), {},
                                            [&](std::size_t) { return S(ho::adam(), mem); }, mem);
  thrust::device_vector<float> x(4);
  const std::vector<std::int32_t> y(4);
  ll.step(thrust::raw_pointer_cast(x.data()), y, 0, 0);
  ll.global_step(thrust::raw_pointer_cast(x.data()), y);
  hg::archive_writer w;
  ll.serialize(w);
  // The thread pipeline: batches uploaded, activations in device buffers, copies on the stream.
  dc::run_pipeline(ll, [](std::size_t t) { return dc::activation_message{t, std::vector<float>(4), std::vector<std::int32_t>(4)}; }, 2);
}

// The transport pipeline over a host transport with device memory: each batch (and a global
// step's slices) staged through host vectors (compiled, never called: it needs its ranks).
void decoupled_over_a_host_transport(cudaStream_t stream, const hg::comm::inproc::communicator& c) {
  const auto mem = hk::thrust_memory(thrust::cuda::par.on(stream));
  using M = std::remove_const_t<decltype(mem)>;
  using S = dc::optim_stepper<ho::adam, M>;
  dc::local_learning<S, device_chain, M> ll(device_chain{}, std::vector<float>(8), {},
                                            [&](std::size_t) { return S(ho::adam(), mem); }, mem);
  dc::run_pipeline_over(c, ll, [](std::size_t t) { return dc::activation_message{t, std::vector<float>(4), std::vector<std::int32_t>(4)}; }, 2);
  std::vector<float> x(4);
  std::vector<std::int32_t> y(4);
  dc::global_step_over(c, ll, x, y);  // PGL's global step: the slices staged the same way
  dc::gather_modules(c, ll);
}

#if defined(HG_HAS_NCCL)

// The synchronous family's per-rank helpers on device memory over NCCL: every kernel of a
// step on the caller's stream, the collectives on the rank's device buffers.
void sync_workers_on_device(cudaStream_t stream, const hg::comm::nccl::communicator& c) {
  const auto mem = hk::thrust_memory(thrust::cuda::par.on(stream));
  using M = std::remove_const_t<decltype(mem)>;
  using C = hg::comm::nccl::communicator;
  thrust::device_vector<float> p(8), g(8);
  const hg::span<float, hg::device_space> ps = hg::make_span(p), gs = hg::make_span(g);
  const std::vector<std::size_t> batches{1, 1};
  hs::bsp_worker<float, ho::adam, C, hs::identity_transform, M> bsp(
      c, ho::adam(), ps, batches, {.mode = hs::aggregation::parameters, .states = hs::state_policy::average},
      {}, {}, mem);
  bsp.step(ps, gs);
  hs::local_sgd_config cfg;
  cfg.period = 4;
  cfg.weighting = hs::averaging::fednova;
  hs::local_sgd_worker<float, ho::adam, C, decltype(ho::diloco_nesterov()), hs::identity_transform, M>
      local(c, ho::adam(), ps, batches, cfg, ho::diloco_nesterov(), {}, {}, mem);
  local.step(ps, hg::span<const float, hg::device_space>(gs));
  local.skip_round(ps);
  hs::selsync_worker<float, ho::momentum, C, hs::identity_transform, M> sel(
      c, ho::momentum(), ps, batches, {}, {}, {}, mem);
  sel.step(ps, gs);
}
#endif

int main() {
  async_servers_on_device(nullptr);
  decoupled_on_device(nullptr);
#if defined(HG_HAS_NCCL)
  sync_workers_on_device(nullptr, hg::comm::nccl::communicator());
#endif
  const ho::schedule lr = ho::cosine_decay(1e-3, 100, 0.0, 10);
  every_path(ho::sgd({.lr = lr, .weight_decay = 0.01}));
  every_path(ho::momentum({.lr = lr}));
  every_path(ho::nesterov({.lr = lr}));
  every_path(ho::adam({.lr = lr}));
  every_path(ho::adamw({.lr = lr}));
  every_path(ho::adagrad({.lr = lr}));
  thrust::device_vector<float> p(8), g(8), m(8), v(8), w(hk::capturable_words<float>);
  const hk::adam_tensor<float, hg::device_space> t{hg::make_span(p), hg::make_span(g),
                                                    hg::make_span(m), hg::make_span(v)};
  hk::multi_tensor_adam_capturable(thrust::cuda::par_nosync,
                                   std::span<const hk::adam_tensor<float, hg::device_space>>(&t, 1),
                                   hg::make_span(w), hk::adam_config<ho::schedule>{.lr = lr});
  return 0;
}

// The LibTorch example's step on CUDA tensors (a shared library of its own in a build with a
// CUDA LibTorch; compiled here so that every build with nvcc checks it).
#include "../../examples/libtorch/fused_adam_cuda.cu"
