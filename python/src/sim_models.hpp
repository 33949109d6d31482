#pragma once
// heterograd.sim's vocabulary: worker-time models (sim/worker_time.hpp) as one Python class,
// TimeModel (a sim::any_time_model and, when the model knows it, its number of workers), and
// the asynchronous server policies (algorithms/async/) by name, each with its described
// configuration (core/describe.hpp): the parameters, their defaults, meanings and rules are
// read from the library's structs, never restated here. A configuration arrives as a dict of
// keyword arguments; a key that is not a field, or a value of the wrong kind or out of its
// rule, is a Python exception naming method.key, the value and the rule.
//
// The name -> policy list (method_table) is the binding's: the library has none yet (the
// driver's registry, tools/driver/algorithms.hpp, also fills settings from an experiment's
// file; issue 44 moves a registry into the library, and this list would then be read from it).

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "arrays.hpp"
#include "heterograd/algorithms/async/asgd.hpp"
#include "heterograd/algorithms/async/dc_asgd.hpp"
#include "heterograd/algorithms/async/fedbuff.hpp"
#include "heterograd/algorithms/async/gradient_table.hpp"
#include "heterograd/algorithms/async/rennala.hpp"
#include "heterograd/algorithms/async/rescaled.hpp"
#include "heterograd/algorithms/async/ringmaster.hpp"
#include "heterograd/algorithms/async/ssp.hpp"
#include "heterograd/balance/dssp.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/sim/worker_time.hpp"

namespace hgpy::simpy {

namespace nb = nanobind;
using namespace nb::literals;
namespace as = heterograd::algorithms::async;
namespace hsim = heterograd::sim;

inline std::string py_repr(nb::handle v) { return nb::repr(v).c_str(); }

// ---- worker-time models -----------------------------------------------------------------

/// A worker-time model from Python: the model, and its number of workers (0: any number).
struct time_model {
  hsim::any_time_model model;
  std::size_t workers = 0;
  std::string text;  // its repr: the calls that made it
};

inline std::size_t joint_workers(const time_model& a, const time_model& b) {
  if (a.workers && b.workers && a.workers != b.workers)
    value_rule("TimeModel", b.text,
               "must have as many workers as " + a.text + " (" + std::to_string(a.workers) +
                   ", not " + std::to_string(b.workers) + ")");
  return a.workers ? a.workers : b.workers;
}

inline hsim::noise_growth growth_of(const std::string& g) {
  if (g == "variance_linear") return hsim::noise_growth::variance_linear;
  if (g == "stddev_linear") return hsim::noise_growth::stddev_linear;
  if (g == "constant") return hsim::noise_growth::constant;
  value_rule("half_normal_noise.growth", "'" + g + "'",
             "must be one of variance_linear, stddev_linear, constant");
}

inline std::string list_text(const std::vector<double>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + heterograd::detail::format_value(v[i]);
  return s + "]";
}

inline void bind_time_model_class(nb::module_& m) {
  nb::class_<time_model>(m, "TimeModel",
                         "A worker-time model (heterograd/sim/worker_time.hpp): the virtual "
                         "seconds job k of worker w takes. Models add (a + b), multiply (a * b) "
                         "and scale (a * 2.0) job by job.")
      .def_ro("workers", &time_model::workers, "its number of workers (0: any number)")
      .def("duration", [](const time_model& t, std::uint32_t w, std::uint64_t k, double now,
                          std::size_t batch) { return t.model.duration(w, k, now, batch); },
           "worker"_a, "job"_a, "now"_a = 0.0, "batch"_a = 1, "Worker w's job k's duration.")
      .def("__add__", [](const time_model& a, const time_model& b) {
        return time_model{hsim::plus(a.model, b.model), joint_workers(a, b), "(" + a.text + " + " + b.text + ")"};
      })
      .def("__mul__", [](const time_model& a, const time_model& b) {
        return time_model{hsim::times(a.model, b.model), joint_workers(a, b), a.text + " * " + b.text};
      })
      .def("__mul__", [](const time_model& a, double f) {
        return time_model{hsim::scaled(a.model, f), a.workers, a.text + " * " + heterograd::detail::format_value(f)};
      })
      .def("__rmul__", [](const time_model& a, double f) {
        return time_model{hsim::scaled(a.model, f), a.workers, heterograd::detail::format_value(f) + " * " + a.text};
      })
      .def("__repr__", [](const time_model& t) { return t.text; });
}

inline void bind_time_models(nb::module_& m) {
  bind_time_model_class(m);
  const auto n_text = [](const char* f, std::size_t n, std::uint64_t seed, bool permute) {
    return std::string(f) + "(" + std::to_string(n) + ", seed=" + std::to_string(seed) +
           (permute ? "" : ", permute=False") + ")";
  };
  m.def("fixed_times", [](std::vector<double> tau) {
    const std::string text = "fixed_times(" + list_text(tau) + ")";
    hsim::fixed_times f(std::move(tau));
    const std::size_t n = f.tau.size();
    return time_model{std::move(f), n, text};
  }, "tau"_a, "Worker w's every job takes tau[w].");
  m.def("sqrt_times", [n_text](std::size_t n, std::uint64_t seed, bool permute) {
    return time_model{hsim::sqrt_times(n, seed, permute), n, n_text("sqrt_times", n, seed, permute)};
  }, "n"_a, "seed"_a, "permute"_a = true,
  "tau_i = 1 + sqrt(i), i < n, permuted across workers by seed (Ringmaster ASGD's experiments).");
  m.def("linear_times", [n_text](std::size_t n, std::uint64_t seed, bool permute) {
    return time_model{hsim::linear_times(n, seed, permute), n, n_text("linear_times", n, seed, permute)};
  }, "n"_a, "seed"_a, "permute"_a = true,
  "tau_i = 1 + i, permuted across workers by seed (Ringleader ASGD's experiments).");
  m.def("half_normal_noise", [](std::uint64_t seed, double scale, const std::string& growth) {
    return time_model{hsim::half_normal_noise(seed, scale, growth_of(growth)), 0,
                      "half_normal_noise(seed=" + std::to_string(seed) + ", scale=" +
                          heterograd::detail::format_value(scale) + ", growth='" + growth + "')"};
  }, "seed"_a, "scale"_a = 1.0, "growth"_a = "variance_linear",
  "|N(0, sigma_w^2)| per job; sigma_w = scale sqrt(w + 1) (variance_linear, the Ringmaster "
  "simulator's noise), scale (w + 1) (stddev_linear) or scale (constant). Add it to a base model.");
  m.def("lognormal_times", [](std::uint64_t seed, std::vector<double> scale, double mu, double sigma) {
    const std::size_t n = scale.size();
    const std::string text = "lognormal_times(seed=" + std::to_string(seed) + ", scale=" + list_text(scale) + ")";
    return time_model{hsim::lognormal_times(seed, std::move(scale), mu, sigma), n == 1 ? 0 : n, text};
  }, "seed"_a, "scale"_a, "mu"_a = 0.0, "sigma"_a = 0.5, "scale[w] exp(N(mu, sigma^2)) per job.");
  m.def("exponential_times", [](std::uint64_t seed, std::vector<double> mean) {
    const std::size_t n = mean.size();
    const std::string text = "exponential_times(seed=" + std::to_string(seed) + ", mean=" + list_text(mean) + ")";
    return time_model{hsim::exponential_times(seed, std::move(mean)), n == 1 ? 0 : n, text};
  }, "seed"_a, "mean"_a, "Exponential job times of mean mean[w].");
  m.def("constant_time", [](double t) {
    return time_model{hsim::constant_time{t}, 0, "constant_time(" + heterograd::detail::format_value(t) + ")"};
  }, "time"_a, "Every job of every worker takes `time`.");
}

// ---- methods and their described configurations -------------------------------------------

/// The configuration of a method without parameters (vanilla ASGD, Ringleader).
struct no_config {
  static constexpr auto description() { return heterograd::describe("no_config"); }
};

/// Sets field `key` of `c` (method `method`) from Python value v, by the field's kind.
template <class C>
void set_described(C& c, const std::string& method, const std::string& key, nb::handle v) {
  bool found = false;
  C::description().for_each([&](const auto& f) {
    if (f.name != key) return;
    found = true;
    using M = typename std::remove_cvref_t<decltype(f)>::member_type;
    const std::string name = method + "." + key;
    if constexpr (std::is_enum_v<M>) {
      std::string s;
      if (!nb::try_cast(v, s)) type_rule(name, py_repr(v), f.choices_rule());
      for (const auto& ch : f.choices)
        if (ch.name == s) { f.of(c) = ch.value; return; }
      value_rule(name, py_repr(v), f.choices_rule());
    } else if constexpr (std::is_same_v<M, bool>) {
      if (!nb::isinstance<nb::bool_>(v)) type_rule(name, py_repr(v), "must be True or False");
      f.of(c) = nb::cast<bool>(v);
    } else if constexpr (std::is_integral_v<M>) {
      long long x = 0;
      if (nb::isinstance<nb::bool_>(v) || !nb::try_cast(v, x, false)) type_rule(name, py_repr(v), "must be an integer");
      if (x < 0 && std::is_unsigned_v<M>)
        value_rule(name, py_repr(v), f.range.has_lo() ? f.range.rule() : std::string("must be >= 0"));
      f.of(c) = static_cast<M>(x);
    } else if constexpr (std::is_floating_point_v<M>) {
      double x = 0;
      if (nb::isinstance<nb::bool_>(v) || !nb::try_cast(v, x)) type_rule(name, py_repr(v), "must be a number");
      f.of(c) = static_cast<M>(x);
    } else if constexpr (heterograd::number_list<M>) {
      if (!nb::try_cast(v, f.of(c))) type_rule(name, py_repr(v), "must be a list of numbers");
    }
  });
  if (found) return;
  std::string names;
  C::description().for_each([&](const auto& f) { names += (names.empty() ? "" : ", ") + std::string(f.name); });
  type_rule(method + "." + key, py_repr(v),
            "is not a parameter of " + method + " (its parameters: " + (names.empty() ? "none" : names) + ")");
}

/// A method's configuration from keyword arguments: defaults, then each key, then the rules.
template <class C>
C config_from(const std::string& method, nb::handle kwargs) {
  C c{};
  if (kwargs.is_valid() && !kwargs.is_none())
    for (auto [k, v] : nb::borrow<nb::dict>(kwargs)) set_described(c, method, nb::cast<std::string>(k), v);
  heterograd::validate_fields(c, method);
  if constexpr (requires { c.validate(); }) c.validate();  // element rules beyond the fields'
  return c;
}

/// A method's configuration as a dict (every field, defaults included) and its fields'
/// descriptions: (name, kind, default, meaning, rule).
template <class C>
nb::dict config_dict(const C& c) {
  nb::dict d;
  C::description().for_each([&](const auto& f) {
    using M = typename std::remove_cvref_t<decltype(f)>::member_type;
    if constexpr (std::is_enum_v<M>) d[f.name.data()] = std::string(f.name_of(f.of(c)));
    else d[f.name.data()] = nb::cast(f.of(c));
  });
  return d;
}
template <class C>
nb::list config_fields() {
  nb::list out;
  const nb::dict defaults = config_dict(C{});
  C::description().for_each([&](const auto& f) {
    using M = typename std::remove_cvref_t<decltype(f)>::member_type;
    std::string rule;
    if constexpr (std::is_enum_v<M>) rule = f.choices_rule();
    else rule = f.range.rule();
    out.append(nb::make_tuple(std::string(f.name), nb::object(defaults[f.name.data()]),
                              std::string(f.meaning), rule));
  });
  return out;
}

/// One method: its name, title and configuration type C; make(n, server, config) builds the
/// policy for the server's element type.
template <class C, class Make>
struct method {
  using config_type = C;
  const char* name;
  const char* title;
  Make make;
};
template <class C, class Make>
method<C, Make> def(const char* name, const char* title, Make make) {
  return {name, title, std::move(make)};
}

#define HGPY_POLICY(P, ...)                                                          \
  [](std::size_t n, auto server, [[maybe_unused]] const auto& c) {                   \
    using T = typename decltype(server)::value_type;                                 \
    return P<T>(n, std::move(server) __VA_OPT__(, ) __VA_ARGS__);                    \
  }

/// Calls f(m) for every method m, in the documentation's order.
template <class F>
void for_each_method(F&& f) {
  f(def<no_config>("asgd", "vanilla ASGD: every gradient applied", HGPY_POLICY(as::asgd)));
  f(def<as::delay_adaptive_config>("delay_adaptive", "delay-adaptive ASGD: gamma n / max(n, delay)",
                                   HGPY_POLICY(as::delay_adaptive_asgd, c)));
  f(def<as::staleness_scaled_config>("staleness_scaled", "staleness-scaled ASGD",
                                     HGPY_POLICY(as::staleness_scaled_asgd, c)));
  f(def<as::ringmaster_config>("ringmaster", "Ringmaster ASGD: delays capped at R",
                               HGPY_POLICY(as::ringmaster_asgd, c)));
  f(def<as::rennala_config>("rennala", "Rennala SGD: B fresh gradients per step",
                            HGPY_POLICY(as::rennala_sgd, c)));
  f(def<as::rescaled_config>("rescaled", "Rescaled ASGD: step gamma tau_i / tau_ref",
                             HGPY_POLICY(as::rescaled_asgd, c)));
  f(def<as::ia2sgd_config>("ia2sgd", "IA2SGD: the mean of every worker's latest gradient",
                           HGPY_POLICY(as::ia2sgd, c)));
  f(def<as::malenia_config>("malenia", "Malenia SGD: rounds at a fixed point",
                            HGPY_POLICY(as::malenia_sgd, c)));
  f(def<no_config>("ringleader", "Ringleader ASGD: gradient tables, one update per worker per round",
                   HGPY_POLICY(as::ringleader_asgd)));
  f(def<as::fedbuff_config>("fedbuff", "FedBuff: K buffered updates per step", HGPY_POLICY(as::fedbuff, c)));
  f(def<as::dc_asgd_config>("dc_asgd", "DC-ASGD: delay-compensated gradients", HGPY_POLICY(as::dc_asgd, c)));
  f(def<as::ssp_config>("ssp", "stale synchronous parallel: at most s pushes ahead",
                        HGPY_POLICY(as::ssp_server, c)));
  f(def<heterograd::balance::dssp_config>("dssp", "dynamic SSP: s_L plus up to r_max granted",
                                          HGPY_POLICY(as::dssp_server, c)));
}
#undef HGPY_POLICY

}  // namespace hgpy::simpy
