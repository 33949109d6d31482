// heterograd.distributed.LocalSGD's C++ side: the synchronisation of a local SGD round for a
// PyTorch model whose parameters the Python side has laid over one flat float32 buffer, while
// the user's own torch optimizer takes the local steps. A thin client of the library:
//
//   average  the transport's weighted average (comm/mpi's allreduce with op avg and this
//            rank's weight: sum_i w_i x_i / sum_i w_i, in place in the model's own memory);
//   outer    an outer optimizer of optim/outer.hpp on the pseudo-gradient anchor - average
//            (outer_optimizer::step_in_place, as local SGD's round runs it), the anchor then
//            becoming the model; with none the model is the average (FedAvg).
//
// That is detail::local_sgd_sync's global case (algorithms/sync/local_sgd.hpp) with the
// keep_local state policy (the inner optimizer's state is the user's, in Python) and no
// transform, with any positive per-rank weight instead of a batch-size rule: OmniLearn-style
// weights or b_i H_i are the caller's to pass. Every blocking call releases the GIL.

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "arrays.hpp"
#include "heterograd/optim/outer.hpp"
#include "plans.hpp"

#if defined(HG_HAS_MPI)
#include "heterograd/comm/mpi.hpp"
#include "mpi_start.hpp"
#endif

namespace hgpy::distpy {

namespace nb = nanobind;
namespace ho = heterograd::optim;
using namespace nb::literals;
using heterograd::detail::format_value;

/// The outer optimizers a LocalSGD can name (optim/outer.hpp); none: the model becomes the
/// weighted average (local SGD, FedAvg).
using outer_rule = std::variant<std::monostate, ho::outer_optimizer<ho::nesterov>,
                                ho::outer_optimizer<ho::momentum>, ho::outer_optimizer<ho::sgd>>;
constexpr const char* outer_names = "None, 'diloco', 'fedavgm', 'sgd'";

/// A LocalSGD's settings, checked on every rank before MPI is touched.
struct local_settings {
  std::int64_t local_steps = 8;
  double weight = 1.0;
  std::string outer = "none";
  std::optional<double> outer_lr;
  std::optional<double> outer_momentum;
  double timeout = 120;

  /// The outer optimizer with its defaults (optim/outer.hpp's makers' where not given).
  outer_rule make() const {
    check_scalars();
    if (outer == "none") {
      if (outer_lr)
        value_rule("outer_lr", format_value(*outer_lr),
                   "must be None when outer is None (no outer optimizer)");
      if (outer_momentum)
        value_rule("outer_momentum", format_value(*outer_momentum),
                   "must be None when outer is None (no outer optimizer)");
      return std::monostate{};
    }
    if (outer == "diloco") {
      const auto d = ho::diloco_nesterov().inner().params();
      return ho::diloco_nesterov(lr(d.lr.value), momentum(d.momentum));
    }
    if (outer == "fedavgm") {
      const auto d = ho::fedavgm().inner().params();
      return ho::fedavgm(lr(d.lr.value), momentum(d.momentum));
    }
    if (outer == "sgd") {
      if (outer_momentum)
        value_rule("outer_momentum", format_value(*outer_momentum),
                   "must be None with outer 'sgd' (use 'fedavgm')");
      return ho::outer_sgd(lr(ho::outer_sgd().inner().params().lr.value));
    }
    value_rule("outer", "'" + outer + "'", std::string("must be one of ") + outer_names);
  }

  /// The settings with the outer optimizer's values filled in, as a dict.
  nb::dict check() const {
    const outer_rule r = make();
    nb::dict d;
    d["local_steps"] = local_steps;
    d["weight"] = weight;
    d["outer"] = outer == "none" ? nb::none() : nb::cast(outer);
    d["outer_lr"] = nb::none();
    d["outer_momentum"] = nb::none();
    std::visit(
        [&](const auto& o) {
          using O = std::remove_cvref_t<decltype(o)>;
          if constexpr (!std::is_same_v<O, std::monostate>) {
            d["outer_lr"] = o.inner().params().lr.value;
            if constexpr (!std::is_same_v<O, ho::outer_optimizer<ho::sgd>>)
              d["outer_momentum"] = o.inner().params().momentum;
          }
        },
        r);
    d["timeout"] = timeout;
    return d;
  }

 private:
  void check_scalars() const {
    if (local_steps < 1)
      value_rule("local_steps", std::to_string(local_steps),
                 "must be >= 1 (local steps per round, H)");
    if (!(std::isfinite(weight) && weight > 0))
      value_rule("weight", format_value(weight),
                 "must be finite and > 0 (this rank's share of the average, e.g. its batch size)");
    if (!(std::isfinite(timeout) && timeout > 0))
      value_rule("timeout", format_value(timeout), "must be finite and > 0 (seconds)");
  }
  double lr(double fallback) const {
    const double v = outer_lr.value_or(fallback);
    if (!(std::isfinite(v) && v > 0))
      value_rule("outer_lr", format_value(v),
                 "must be finite and > 0 (the outer step on anchor - average)");
    return v;
  }
  double momentum(double fallback) const {
    const double v = outer_momentum.value_or(fallback);
    if (!(std::isfinite(v) && v >= 0 && v < 1))
      value_rule("outer_momentum", format_value(v), "must be in [0, 1)");
    return v;
  }
};

#if defined(HG_HAS_MPI)

namespace hmpi = heterograd::comm::mpi;
using outer_state = ho::state<float, heterograd::host_space>;

/// One LocalSGD's MPI side: the communicator, the anchor and the outer optimizer's state.
class local_session {
 public:
  local_session(local_settings s, nb::handle flat) : s_(std::move(s)), outer_(s_.make()) {
    x_ = take_array(flat, "flat", true);
    if (x_.type != element::f32) type_rule("flat", "dtype float64", "must be float32");
    init_mpi();
    nb::gil_scoped_release unlocked;
    comm_ = hmpi::communicator(MPI_COMM_WORLD);  // a collective: every rank makes its session here
    // One starting point on every rank: rank 0's model (the anchor must be common).
    comm_.broadcast(params(), 0, heterograd::comm::broadcast_options{.timeout = timeout()}).wait();
    std::visit(
        [&](const auto& o) {
          if constexpr (!std::is_same_v<std::remove_cvref_t<decltype(o)>, std::monostate>) {
            anchor_.assign(params().begin(), params().end());
            state_ = o.init(host_policy(), anchor_);
          }
        },
        outer_);
  }

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  std::uint64_t rounds() const { return rounds_; }
  bool has_anchor() const { return !anchor_.empty(); }
  std::size_t outer_slots() const { return state_.slots.size(); }

  /// The round's synchronisation (collective): the weighted average into the model, then
  /// the outer step (the anchor becomes the model).
  void sync() {
    nb::gil_scoped_release unlocked;
    average();
    std::visit(
        [&](const auto& outer) {
          if constexpr (!std::is_same_v<std::remove_cvref_t<decltype(outer)>, std::monostate>) {
            outer.step_in_place(host_policy(), params(), state_, anchor_);
            std::copy(anchor_.begin(), anchor_.end(), params().begin());
          }
        },
        outer_);
    ++rounds_;
  }

  /// x <- sum_i w_i x_i / sum_i w_i over the ranks: the transport's weighted average
  /// (allreduce_options::weight, every rank passing its own).
  void average() {
    heterograd::comm::allreduce_options o;
    o.op = heterograd::comm::reduce_op::avg;
    o.weight = s_.weight;
    o.timeout = timeout();
    comm_.allreduce(params(), o).wait();
  }

  /// Copies the anchor and the outer state's slots into the caller's arrays; returns the
  /// outer state's count.
  std::int64_t read_state(nb::handle anchor, nb::handle slots) const {
    if (has_anchor()) copy_into(anchor_, anchor, "LocalSGD.anchor");
    const auto outs = take_list(slots, "slots", namer{"LocalSGD", nb::none()}, true, nullptr, "");
    need(outs.size(), state_.slots.size(), "LocalSGD.slots (count)");
    const nb::sequence seq = nb::borrow<nb::sequence>(slots);
    for (std::size_t k = 0; k < outs.size(); ++k)
      copy_into(state_.slots[k], seq[k], "LocalSGD.slots[" + std::to_string(k) + "]");
    return state_.count;
  }

  /// Checks a saved anchor, outer state slots and count against this session's shapes.
  std::vector<array_ref> check_state(nb::handle anchor, nb::handle slots,
                                     std::int64_t count) const {
    const std::size_t n = x_.size;
    std::vector<array_ref> in;
    if (has_anchor()) in.push_back(checked(anchor, "LocalSGD.state.anchor", n));
    const nb::sequence seq = nb::borrow<nb::sequence>(slots);
    need(nb::len(seq), state_.slots.size(), "LocalSGD.state.outer_slots (count)");
    for (std::size_t k = 0; k < state_.slots.size(); ++k)
      in.push_back(checked(seq[k], "LocalSGD.state.outer_slots[" + std::to_string(k) + "]", n));
    if (count < 0) value_rule("LocalSGD.state.outer_count", std::to_string(count), "must be >= 0");
    return in;
  }

  /// Restores rounds, anchor and outer state (everything checked before anything changes).
  void write_state(std::uint64_t rounds, nb::handle anchor, nb::handle slots, std::int64_t count) {
    const auto in = check_state(anchor, slots, count);
    std::size_t at = 0;
    if (has_anchor()) assign(anchor_, in[at++]);
    for (auto& slot : state_.slots) assign(slot, in[at++]);
    state_.count = count;
    rounds_ = rounds;
  }

  /// This rank's share of the next averages (checked by the settings' rule).
  void set_weight(double w) {
    local_settings s = s_;
    s.weight = w;
    (void)s.make();
    s_.weight = w;
  }

 private:
  heterograd::span<float> params() const { return {static_cast<float*>(x_.data), x_.size}; }
  heterograd::seconds timeout() const { return heterograd::seconds{s_.timeout}; }
  static void need(std::size_t got, std::size_t want, const std::string& name) {
    if (got != want) value_rule(name, std::to_string(got), "must be " + std::to_string(want));
  }
  static array_ref checked(nb::handle x, const std::string& name, std::size_t n) {
    array_ref r = take_array(x, name, false);
    if (r.type != element::f32) type_rule(name, "dtype float64", "must be float32");
    need(r.size, n, name + " (elements)");
    return r;
  }
  template <class V>
  void copy_into(const V& from, nb::handle to, const std::string& name) const {
    const array_ref r = take_array(to, name, true);
    if (r.type != element::f32) type_rule(name, "dtype float64", "must be float32");
    need(r.size, from.size(), name + " (elements)");
    std::copy(from.begin(), from.end(), static_cast<float*>(r.data));
  }
  template <class V>
  static void assign(V& to, const array_ref& r) {
    const float* p = static_cast<const float*>(r.data);
    to.assign(p, p + r.size);
  }

  local_settings s_;
  outer_rule outer_;
  array_ref x_;
  hmpi::communicator comm_;
  std::vector<float> anchor_;
  outer_state state_;
  std::uint64_t rounds_ = 0;
};

#endif  // HG_HAS_MPI

void bind_local_sgd(nb::module_& m) {
  const auto settings_of = [](std::int64_t h, double w, std::optional<std::string> outer,
                              std::optional<double> lr, std::optional<double> mu, double timeout) {
    return local_settings{h, w, outer.value_or("none"), lr, mu, timeout};
  };
  m.def(
      "local_sgd_check",
      [settings_of](std::int64_t h, double w, std::optional<std::string> outer,
                    std::optional<double> lr, std::optional<double> mu, double timeout) {
        return settings_of(h, w, std::move(outer), lr, mu, timeout).check();
      },
      "local_steps"_a, "weight"_a, "outer"_a.none(), "outer_lr"_a.none(), "outer_momentum"_a.none(),
      "timeout"_a,
      "Checks a LocalSGD's settings; returns them with the outer optimizer's defaults filled in.");
#if defined(HG_HAS_MPI)
  nb::class_<local_session>(m, "LocalSession",
                            "One LocalSGD's MPI side (heterograd.distributed.LocalSGD drives it).")
      .def(
          "__init__",
          [settings_of](local_session* p, std::int64_t h, double w,
                        std::optional<std::string> outer, std::optional<double> lr,
                        std::optional<double> mu, double timeout, nb::handle flat) {
            new (p) local_session(settings_of(h, w, std::move(outer), lr, mu, timeout), flat);
          },
          "local_steps"_a, "weight"_a, "outer"_a.none(), "outer_lr"_a.none(),
          "outer_momentum"_a.none(), "timeout"_a, "flat"_a,
          "Checks everything, starts MPI if mpirun started this process, makes the communicator "
          "and broadcasts rank 0's model into flat (collectives: every rank at once).")
      .def_prop_ro("rank", &local_session::rank)
      .def_prop_ro("size", &local_session::size)
      .def_prop_ro("rounds", &local_session::rounds)
      .def_prop_ro("has_anchor", &local_session::has_anchor)
      .def_prop_ro("outer_slots", &local_session::outer_slots)
      .def("sync", &local_session::sync,
           "The round's weighted average and outer step, into flat (collective; GIL released).")
      .def("read_state", &local_session::read_state, "anchor"_a.none(), "slots"_a,
           "Copies the anchor and the outer state's slots out; returns the outer count.")
      .def("set_weight", &local_session::set_weight, "weight"_a,
           "This rank's share of the next averages (finite, > 0).")
      .def(
          "check_state",
          [](const local_session& s, nb::handle anchor, nb::handle slots, std::int64_t count) {
            (void)s.check_state(anchor, slots, count);
          },
          "anchor"_a.none(), "slots"_a, "count"_a,
          "Checks a saved anchor, outer slots and count against this session (changes nothing).")
      .def("write_state", &local_session::write_state, "rounds"_a, "anchor"_a.none(), "slots"_a,
           "count"_a, "Restores the round count, anchor and outer state (checked first).");
#endif
}

}  // namespace hgpy::distpy
