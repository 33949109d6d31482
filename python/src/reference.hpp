#pragma once
// The C++ optimizers themselves, for the tests: optim::sgd, momentum, nesterov, adam, adamw,
// adagrad and lamb (heterograd/optim/optimizers.hpp) built from a configuration, their state
// made by init() and stepped by update() on their own copies of the buffers, so that the tests
// can hold the Python optimizers to them bit for bit. Not a path for training (it copies).

#include <nanobind/nanobind.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "plans.hpp"

namespace hgpy {

namespace ho = heterograd::optim;

/// Steps `opt` once per element of `grads` from a fresh state, on a copy of `params`; writes
/// the final parameters into `params` and the state's slots into `slots`. Returns the count.
template <class T, class Opt>
std::int64_t run_cxx(const Opt& opt, const array_ref& params, const std::vector<array_ref>& grads,
                     const std::vector<array_ref>& slots) {
  const std::size_t n = params.size;
  std::vector<T> p(ptr<T>(params), ptr<T>(params) + n);
  auto st = opt.init(host_policy(), p);
  heterograd::require(slots.size() == st.slots.size(), "slots (count)", slots.size(),
                      "must be " + std::to_string(st.slots.size()) + " for " +
                          std::string(Opt::name()));
  for (const array_ref& g : grads) {
    const std::vector<T> gv(ptr<T>(g), ptr<T>(g) + n);
    opt.update(host_policy(), gv, st, p);
  }
  std::copy(p.begin(), p.end(), ptr<T>(params));
  for (std::size_t s = 0; s < slots.size(); ++s)
    std::copy(st.slots[s].begin(), st.slots[s].end(), ptr<T>(slots[s]));
  return st.count;
}

template <class Opt, class C>
std::int64_t run_named(nb::handle config, const array_ref& params,
                       const std::vector<array_ref>& grads, const std::vector<array_ref>& slots) {
  const Opt opt(nb::cast<C>(config));
  nb::gil_scoped_release unlocked;
  return by_type(params.type, [&](auto t) { return run_cxx<decltype(t)>(opt, params, grads, slots); });
}

/// reference_run(kind, config, params, grads, slots): see the header comment.
inline std::int64_t reference_run(const std::string& kind, nb::handle config, nb::handle params,
                                  nb::sequence grads, nb::sequence slots) {
  const namer name{"reference_run", nb::none()};
  std::vector<array_ref> p;
  p.push_back(take_array(params, "reference_run.params", true));
  const auto g = take_list(grads, "grads", name, false, nullptr, "");
  for (std::size_t k = 0; k < g.size(); ++k) {
    if (g[k].type != p[0].type || g[k].size != p[0].size)
      value_rule(name("grads", k), std::to_string(g[k].size) + " elements",
                 "must match params in size and dtype");
  }
  std::vector<array_ref> s = take_list(slots, "slots", name, true, nullptr, "");
  for (std::size_t k = 0; k < s.size(); ++k) {
    if (s[k].type != p[0].type || s[k].size != p[0].size)
      value_rule(name("slots", k), std::to_string(s[k].size) + " elements",
                 "must match params in size and dtype");
  }
  if (kind == "sgd") return run_named<ho::sgd, ho::sgd_config>(config, p[0], g, s);
  if (kind == "momentum") return run_named<ho::momentum, ho::momentum_config>(config, p[0], g, s);
  if (kind == "nesterov") return run_named<ho::nesterov, ho::momentum_config>(config, p[0], g, s);
  if (kind == "adam") return run_named<ho::adam, ho::adam_config>(config, p[0], g, s);
  if (kind == "adamw") return run_named<ho::adamw, ho::adam_config>(config, p[0], g, s);
  if (kind == "adagrad") return run_named<ho::adagrad, ho::adagrad_config>(config, p[0], g, s);
  if (kind == "lamb") return run_named<ho::lamb, ho::lamb_config>(config, p[0], g, s);
  value_rule("reference_run.kind", kind,
             "must be one of sgd, momentum, nesterov, adam, adamw, adagrad, lamb");
}

}  // namespace hgpy
