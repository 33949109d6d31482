#pragma once
// The library's hyper-parameter structs and learning-rate schedules as Python classes. The
// structs are bound from their descriptions (heterograd/core/describe.hpp): each described field
// becomes a property with the field's name and meaning, the defaults are the structs' member
// initialisers and validate() is the library's validate_fields, so Python restates none of
// them. A schedule is the library's optim::schedule; a number stands for a constant one.

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>

#include "heterograd/core/describe.hpp"
#include "heterograd/kernels/hyperparameters.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/optim/schedule.hpp"

namespace hgpy {

namespace nb = nanobind;
using namespace nb::literals;
using heterograd::optim::schedule;

inline const char* schedule_kind_name(schedule::kind k) {
  switch (k) {
    case schedule::kind::constant: return "constant";
    case schedule::kind::linear_warmup: return "linear_warmup";
    case schedule::kind::step_decay: return "step_decay";
    case schedule::kind::cosine_decay: return "cosine_decay";
    case schedule::kind::inverse_sqrt: return "inverse_sqrt";
    case schedule::kind::inverse_time: return "inverse_time";
  }
  return "unknown";
}

// The shortest text that reads back as the same double.
inline std::string shortest(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

/// The constructor call that makes `s` again (its repr).
inline std::string schedule_repr(const schedule& s) {
  std::string r = std::string(schedule_kind_name(s.type)) + "(" + shortest(s.value);
  const auto i = [](std::int64_t v) { return ", " + std::to_string(v); };
  const auto d = [](double v) { return ", " + shortest(v); };
  switch (s.type) {
    case schedule::kind::constant: break;
    case schedule::kind::linear_warmup: r += i(s.warmup) + d(s.init); break;
    case schedule::kind::step_decay: r += i(s.period) + d(s.factor); break;
    case schedule::kind::cosine_decay: r += i(s.period) + d(s.factor) + i(s.warmup); break;
    case schedule::kind::inverse_sqrt: r += i(s.warmup); break;
    case schedule::kind::inverse_time: r += d(s.factor); break;
  }
  return r + ")";
}

using schedule_tuple = std::tuple<int, double, double, double, std::int64_t, std::int64_t>;

inline void bind_schedules(nb::module_& m) {
  namespace o = heterograd::optim;
  nb::class_<schedule>(m, "Schedule",
                       "A learning rate as a function of t, the number of steps already applied "
                       "(heterograd/optim/schedule.hpp). A number stands for a constant schedule.")
      .def(nb::init_implicit<double>(), "value"_a)
      .def("__call__", &schedule::operator(), "t"_a, "The value at step t (t = steps applied).")
      .def_prop_ro("kind", [](const schedule& s) { return schedule_kind_name(s.type); })
      .def_ro("value", &schedule::value, "the constant, peak or base value")
      .def_ro("init", &schedule::init, "linear_warmup: the value at step 0")
      .def_ro("factor", &schedule::factor, "step_decay gamma, cosine alpha, inverse_time rate")
      .def_ro("warmup", &schedule::warmup, "warm-up steps")
      .def_ro("period", &schedule::period, "step_decay step size, cosine decay steps")
      .def(
          "validate", [](const schedule& s, const std::string& field) { s.validate(field); },
          "field"_a = "lr",
           "Raises ValueError naming `field` when a value breaks a rule.")
      .def("__repr__", &schedule_repr)
      .def("__eq__", [](const schedule& a, const schedule& b) {
        return a.type == b.type && a.value == b.value && a.init == b.init &&
               a.factor == b.factor && a.warmup == b.warmup && a.period == b.period;
      })
      .def("__getstate__", [](const schedule& s) {
        return schedule_tuple(static_cast<int>(s.type), s.value, s.init, s.factor, s.warmup,
                              s.period);
      })
      .def("__setstate__", [](schedule& s, const schedule_tuple& t) {
        new (&s) schedule();
        s.type = static_cast<schedule::kind>(std::get<0>(t));
        std::tie(std::ignore, s.value, s.init, s.factor, s.warmup, s.period) = t;
        s.validate("Schedule");
      });
  m.def("constant", &o::constant, "value"_a, "v at every step.");
  m.def("linear_warmup", &o::linear_warmup, "peak"_a, "warmup_steps"_a, "init"_a = 0.0,
        "init + (peak - init) t / warmup_steps for t < warmup_steps, then peak.");
  m.def("step_decay", &o::step_decay, "base"_a, "step_size"_a, "gamma"_a,
        "base gamma^floor(t / step_size).");
  m.def("cosine_decay", &o::cosine_decay, "base"_a, "decay_steps"_a, "alpha"_a = 0.0,
        "warmup_steps"_a = 0,
        "Linear warm-up 0 -> base over warmup_steps, then base (alpha + (1 - alpha)(1 + "
        "cos(pi min(t - W, D) / D)) / 2) (Loshchilov & Hutter 2017, without restarts).");
  m.def("inverse_sqrt", &o::inverse_sqrt, "base"_a, "warmup_steps"_a = 0,
        "base t / W for t < W, then base sqrt(W / t) (W = 0: base / sqrt(t + 1)).");
  m.def("inverse_time", &o::inverse_time, "base"_a, "decay"_a, "base / (1 + decay t).");
}

/// Sets the field of `c` named `key` from `v` (TypeError for a name `C` does not describe).
template <class C>
void set_field(C& c, const std::string& key, nb::handle v) {
  bool found = false;
  C::description().for_each([&](const auto& f) {
    if (f.name != key) return;
    using M = typename std::remove_cvref_t<decltype(f)>::member_type;
    f.of(c) = nb::cast<M>(v);
    found = true;
  });
  if (!found) {
    std::string names;
    C::description().for_each([&](const auto& f) {
      if (!names.empty()) names += ", ";
      names += f.name;
    });
    throw nb::type_error((std::string(C::description().name) + " has no field '" + key +
                          "' (fields: " + names + ")")
                             .c_str());
  }
}

/// Binds C (a described hyper-parameter struct) as Python class `name`: a keyword constructor,
/// one property per field, validate() and a repr.
template <class C>
void bind_config(nb::module_& m, const char* name, const char* doc) {
  nb::class_<C> cls(m, name, doc);
  cls.def("__init__", [](C* self, nb::kwargs kw) {
    new (self) C{};
    for (auto [k, v] : kw) set_field(*self, nb::cast<std::string>(k), v);
  });
  // Field names and meanings are string literals (describe_field's arguments), so their
  // views end in a NUL that nanobind may keep pointing at.
  C::description().for_each(
      [&](const auto& f) { cls.def_rw(f.name.data(), f.member, f.meaning.data()); });
  cls.def(
      "validate",
      [](const C& c, const std::string& prefix) { heterograd::validate_fields(c, prefix); },
      "prefix"_a = std::string(C::description().name),
      "Raises ValueError naming `prefix.field`, the value and the rule when a field breaks its "
      "rule.");
  cls.def("__repr__", [name](const nb::handle self) {
    std::string s = std::string(name) + "(";
    bool first = true;
    C::description().for_each([&](const auto& f) {
      if (!first) s += ", ";
      first = false;
      s += std::string(f.name) + "=" + nb::repr(self.attr(f.name.data())).c_str();
    });
    return s + ")";
  });
}

inline void bind_configs(nb::module_& m) {
  namespace k = heterograd::kernels;
  bind_config<k::sgd_config<schedule>>(m, "SGDConfig",
                                       "SGD: p <- p - lr (g + weight_decay p).");
  bind_config<k::momentum_config<schedule>>(
      m, "MomentumConfig",
      "Heavy-ball and Nesterov momentum (PyTorch's form): d = g + weight_decay p; v <- momentum "
      "v + (1 - dampening) d; p <- p - lr (nesterov ? d + momentum v : v).");
  bind_config<k::adam_config<schedule>>(
      m, "AdamConfig",
      "Adam (Kingma & Ba 2015) and AdamW (Loshchilov & Hutter 2019): m, v as Adam; p <- p (1 - "
      "lr weight_decay) (AdamW) - lr/c1 m / (sqrt(v)/sqrt(c2) + eps).");
  bind_config<k::adagrad_config<schedule>>(
      m, "AdagradConfig",
      "Adagrad (Duchi et al. 2011), PyTorch's form: clr = lr / (1 + (step-1) lr_decay); s <- s + "
      "g'^2; p <- p - clr g' / (sqrt(s) + eps).");
  bind_config<k::lamb_config<schedule>>(
      m, "LAMBConfig",
      "LAMB (You et al. 2020): the Adam direction plus weight decay, scaled per tensor by the "
      "trust ratio ||p|| / ||r||.");
  // AdamW's defaults differ from Adam's (weight_decay 0.01): the C++ optimizer's own.
  m.def("adamw_defaults", [] { return heterograd::optim::adamw{}.params(); },
        "The defaults of optim::adamw (AdamConfig).");
}

}  // namespace hgpy
