// Compiled by nvcc in every build that has it (test cuda_compile_device_paths; never run):
// instantiates the device code of the mixed-precision, capturable and loss-scaled optimizer
// paths for the CUDA system, which the header check cannot (templates are compiled only
// where they are used). The CUDA twins of kernels_test and optim_test run them on a GPU.
#include <span>

#include <thrust/device_vector.h>

#include "heterograd/kernels/capturable.hpp"
#include "heterograd/optim.hpp"

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

int main() {
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
