#pragma once
// FedBuff-style buffered asynchronous aggregation (Nguyen, Malik, Zhan, Yousefpour, Rabbat,
// Malek, Huba, "Federated Learning with Buffered Asynchronous Aggregation", AISTATS 2022).
// Contributions (gradients, or client deltas expressed as descent directions) arrive
// asynchronously and are summed into a buffer, each down-weighted by its staleness; after K
// of them the server takes one step with their average and clears the buffer:
//     buf <- buf + s(delta) g ;   every K arrivals:  x <- x - gamma buf / K ;  buf <- 0 ,
// s(delta) = (1 + delta)^(-a) (the paper's 1/sqrt(1 + staleness) for a = 0.5), or 1.
// Workers restart from the current model after every push. Paper default K = 10.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

#include "heterograd/algorithms/async/server.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::async {

struct fedbuff_config {
  std::size_t buffer = 10;          ///< K
  bool staleness_weighting = true;  ///< s(delta) = (1 + delta)^(-exponent); false: s = 1
  double exponent = 0.5;

  static constexpr auto description() {
    return describe(
        "fedbuff_config",
        describe_field("buffer", &fedbuff_config::buffer, "K: updates buffered per server step",
                       at_least(1)),
        describe_field("staleness_weighting", &fedbuff_config::staleness_weighting,
                       "weight updates by (1 + delay)^(-exponent) (false: 1)"),
        describe_field("exponent", &fedbuff_config::exponent, "exponent of the staleness weight",
                       finite_at_least(0)));
  }
  void validate() const { validate_fields(*this); }
};

template <class T = double, class Optimizer = default_optimizer, class Memory = host_memory>
class fedbuff : public detail::policy_base<T, Optimizer, Memory> {
  using base = detail::policy_base<T, Optimizer, Memory>;

 public:
  fedbuff(std::size_t workers, model_server<T, Optimizer, Memory> server, fedbuff_config config = {})
      : base(workers, std::move(server)), config_((config.validate(), config)),
        buffer_(this->server_.make(this->dim())) {}

  const fedbuff_config& config() const { return config_; }
  std::size_t buffered() const { return count_; }
  // Membership: policy_base's hooks. Updates already in the buffer stay (K counts updates,
  // not clients; FedBuff's buffer holds deltas whoever sent them).

  template <class Ctl, class Arrival, class G>
  void on_arrival(Ctl& ctl, const Arrival& a, const G& g) {
    const auto in = this->admit(ctl, a, g, "fedbuff");
    if (!in) return;
    const std::uint64_t delay = in->delay;
    const double s = config_.staleness_weighting
                         ? std::pow(1.0 + static_cast<double>(delay), -config_.exponent)
                         : 1.0;
    const auto b = this->server_.view(buffer_);
    detail::ops::axpy(this->server_.memory(), static_cast<T>(s), in->gradient, b);
    if (++count_ < config_.buffer) {
      ctl.buffered(a.worker, delay);
      return;
    }
    this->server_.apply(this->server_.view(std::as_const(buffer_)), 1.0 / static_cast<double>(config_.buffer));
    detail::ops::zero(this->server_.memory(), b);
    count_ = 0;
    ctl.applied(a.worker, delay);
  }

  friend bool operator==(const fedbuff& a, const fedbuff& b) {
    return a.server_ == b.server_ && a.same_membership(b) && a.count_ == b.count_ &&
           kernels::same_bits(a.server_.memory(), a.buffer_, b.buffer_);
  }

  /// Checkpointing (core/archive.hpp): the mutable state; the configuration is rebuilt.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(this->server_);
    this->serialize_membership(ar);
    kernels::archive_buffer(ar, this->server_.memory(), buffer_, "fedbuff.buffer", this->dim());
    ar(count_);
  }

 private:
  fedbuff_config config_;
  typename base::server_type::vector_type buffer_;
  std::size_t count_ = 0;
};
template <class T, class O, class M>
fedbuff(std::size_t, model_server<T, O, M>) -> fedbuff<T, O, M>;
template <class T, class O, class M>
fedbuff(std::size_t, model_server<T, O, M>, fedbuff_config) -> fedbuff<T, O, M>;

}  // namespace heterograd::algorithms::async
