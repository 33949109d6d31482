#pragma once
// The hyper-parameters of every optimizer, defined once: one struct per optimizer with its
// defaults (the member initialisers) and its description (core/describe.hpp), used by the
// fused kernels (kernels/updates.hpp), by optim (optim::sgd_config names
// sgd_config<optim::schedule>, ...), by the C API and by the driver's schema.
//
// `Lr` is the learning rate's type: a number here in kernels, a schedule in optim (anything
// callable with the number of steps already applied). What only the caller knows at each
// call (the step index, Nesterov or not, decoupled weight decay or not: the optimizer's kind,
// not a setting) is a kernel's `*_options`.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "heterograd/core/describe.hpp"

namespace heterograd::kernels {

namespace detail {
// The fields several optimizers share, with one name, meaning and rule each.
template <class C, class Lr>
constexpr auto lr_field(Lr C::*m) {
  return describe_field("lr", m, "learning rate", finite_at_least(0));
}
template <class C>
constexpr auto l2_decay_field(double C::*m) {
  return describe_field("weight_decay", m, "L2 weight decay (added to the gradient)",
                        finite_at_least(0));
}
template <class C>
constexpr auto beta1_field(double C::*m) {
  return describe_field("beta1", m, "decay of the first moment", closed_open(0, 1));
}
template <class C>
constexpr auto beta2_field(double C::*m) {
  return describe_field("beta2", m, "decay of the second moment", closed_open(0, 1));
}
template <class C>
constexpr auto eps_field(double C::*m) {
  return describe_field("eps", m, "added to the denominator", finite_above(0));
}
template <class C>
constexpr auto bias_correction_field(bool C::*m) {
  return describe_field("bias_correction", m, "divide the moments by 1 - beta^step");
}
}  // namespace detail

/// SGD: p <- p - lr (g + weight_decay p).
template <class Lr = double>
struct sgd_config {
  Lr lr = 0.01;
  double weight_decay = 0.0;

  static constexpr auto description() {
    return describe("sgd", detail::lr_field(&sgd_config::lr),
                    detail::l2_decay_field(&sgd_config::weight_decay));
  }
};

/// Heavy-ball and Nesterov momentum (Sutskever et al. 2013; PyTorch's form):
///   d = g + weight_decay p;  v <- momentum v + (1 - dampening) d;
///   p <- p - lr (nesterov ? d + momentum v : v).
template <class Lr = double>
struct momentum_config {
  Lr lr = 0.01;
  double momentum = 0.9;
  double dampening = 0.0;
  double weight_decay = 0.0;

  static constexpr auto description() {
    return describe("momentum", detail::lr_field(&momentum_config::lr),
                    describe_field("momentum", &momentum_config::momentum,
                                   "momentum coefficient mu", closed_open(0, 1)),
                    describe_field("dampening", &momentum_config::dampening,
                                   "dampening of the gradient added to the velocity", closed(0, 1)),
                    detail::l2_decay_field(&momentum_config::weight_decay));
  }
};

/// Adam (Kingma & Ba 2015, Alg. 1) and AdamW (Loshchilov & Hutter 2019, Alg. 2):
///   g' = g + weight_decay p (Adam only);  m <- b1 m + (1-b1) g';  v <- b2 v + (1-b2) g'^2;
///   p <- p (1 - lr weight_decay) (AdamW only) - lr/c1 * m / (sqrt(v)/sqrt(c2) + eps),
/// with c1 = 1 - b1^step, c2 = 1 - b2^step (1 without bias correction, as in FedAdam).
/// AdamW's default weight_decay is 0.01 (optim::adamw's default value, PyTorch's).
template <class Lr = double>
struct adam_config {
  Lr lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool bias_correction = true;

  static constexpr auto description() {
    return describe(
        "adam", detail::lr_field(&adam_config::lr), detail::beta1_field(&adam_config::beta1),
        detail::beta2_field(&adam_config::beta2), detail::eps_field(&adam_config::eps),
        describe_field("weight_decay", &adam_config::weight_decay,
                       "weight decay (Adam: L2 added to the gradient; AdamW: decoupled)",
                       finite_at_least(0)),
        detail::bias_correction_field(&adam_config::bias_correction));
  }
};

/// Adagrad (Duchi et al. 2011), PyTorch's form: clr = lr / (1 + (step-1) lr_decay);
/// g' = g + weight_decay p;  s <- s + g'^2;  p <- p - clr g' / (sqrt(s) + eps).
template <class Lr = double>
struct adagrad_config {
  Lr lr = 0.01;
  double eps = 1e-10;
  double weight_decay = 0.0;
  double lr_decay = 0.0;
  double initial_accumulator = 0.0;  ///< the sum of squares s starts here (optimizer state)

  static constexpr auto description() {
    return describe(
        "adagrad", detail::lr_field(&adagrad_config::lr), detail::eps_field(&adagrad_config::eps),
        detail::l2_decay_field(&adagrad_config::weight_decay),
        describe_field("lr_decay", &adagrad_config::lr_decay,
                       "learning-rate decay: lr / (1 + (step - 1) lr_decay)", finite_at_least(0)),
        describe_field("initial_accumulator", &adagrad_config::initial_accumulator,
                       "initial value of the sum of squared gradients", finite_at_least(0)));
  }
};

/// LAMB (You et al. 2020, Alg. 2), per tensor l:
///   m, v as Adam;  r = (m/c1) / (sqrt(v/c2) + eps) + weight_decay p;
///   p <- p - lr * (||p_l|| / ||r_l||) r   (trust ratio 1 when either norm is 0).
template <class Lr = double>
struct lamb_config {
  Lr lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 0.01;
  std::vector<std::size_t> tensor_sizes = {};  ///< empty: the buffer is one tensor
  bool bias_correction = true;

  static constexpr auto description() {
    return describe(
        "lamb", detail::lr_field(&lamb_config::lr), detail::beta1_field(&lamb_config::beta1),
        detail::beta2_field(&lamb_config::beta2), detail::eps_field(&lamb_config::eps),
        describe_field("weight_decay", &lamb_config::weight_decay,
                       "weight decay (added to the direction)", finite_at_least(0)),
        describe_field("tensor_sizes", &lamb_config::tensor_sizes,
                       "sizes of the tensors packed in the buffer, one trust ratio each "
                       "(empty: one tensor)"),
        detail::bias_correction_field(&lamb_config::bias_correction));
  }
};

}  // namespace heterograd::kernels
