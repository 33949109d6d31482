// heterograd._core: the Python module's C++ side (nanobind). A thin client of the library: it
// binds the hyper-parameter structs and schedules (configs.hpp), checks the caller's arrays and
// runs the fused kernels on them in place (arrays.hpp, plans.hpp), and exposes the C++
// optimizers for the tests' bitwise comparisons (reference.hpp). heterograd.optim (Python)
// builds torch.optim.Optimizer semantics on top. The simulator with a Python gradient
// (heterograd.sim) is bound in sim.cpp, the parameter server over MPI
// (heterograd.distributed) in dist.cpp.

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "configs.hpp"
#include "heterograd/version.hpp"
#include "plans.hpp"
#include "reference.hpp"

namespace hgpy::simpy {
// heterograd.sim (sim.cpp).
void bind_sim_module(nanobind::module_& m);
}  // namespace hgpy::simpy

namespace hgpy {
// heterograd.distributed (dist.cpp).
void bind_distributed(nanobind::module_& m);
}  // namespace hgpy

namespace {

namespace nb = nanobind;
using namespace nb::literals;
namespace hk = heterograd::kernels;
using hgpy::schedule;

constexpr const char* plan_doc =
    "Checks the arrays (params and the state slots writable; everything float32 or float64 "
    "alike, C-contiguous, in host memory, of params[k]'s size) and the configuration, and returns "
    "a Plan that runs the step when run() is called. Nothing is written before run(). `where` "
    "prefixes the names in errors; `index` maps list positions to the names' indices.";

void bind_plans(nb::module_& m) {
  nb::class_<hgpy::plan>(m, "Plan", "One checked optimizer step, run once by run().")
      .def("run", &hgpy::plan::run, "Runs the step (the GIL is released meanwhile).")
      .def_ro("done", &hgpy::plan::done)
      .def("__repr__", [](const hgpy::plan& p) { return "<heterograd Plan: " + p.what + ">"; });
  m.def("plan_sgd", &hgpy::plan_sgd, "params"_a, "grads"_a, "config"_a, "step"_a,
        "where"_a = "sgd", "index"_a = nb::none(), plan_doc);
  m.def("plan_momentum", &hgpy::plan_momentum, "params"_a, "grads"_a, "velocity"_a, "config"_a,
        "step"_a, "nesterov"_a = false, "where"_a = "momentum", "index"_a = nb::none(), plan_doc);
  m.def("plan_adam", &hgpy::plan_adam, "params"_a, "grads"_a, "m"_a, "v"_a, "config"_a, "step"_a,
        "decoupled"_a = false, "where"_a = "adam", "index"_a = nb::none(), plan_doc);
  m.def("plan_adagrad", &hgpy::plan_adagrad, "params"_a, "grads"_a, "sum_sq"_a, "config"_a,
        "step"_a, "where"_a = "adagrad", "index"_a = nb::none(), plan_doc);
  m.def("plan_lamb", &hgpy::plan_lamb, "params"_a, "grads"_a, "m"_a, "v"_a, "config"_a, "step"_a,
        "where"_a = "lamb", "index"_a = nb::none(), plan_doc);
}

void bind_build(nb::module_& m) {
  m.attr("__version__") = std::to_string(heterograd::version_major) + "." +
                          std::to_string(heterograd::version_minor) + "." +
                          std::to_string(heterograd::version_patch);
#if defined(_OPENMP)
  m.attr("backend") = "omp";
#else
  m.attr("backend") = "cpp";
#endif
  m.attr("cuda") = false;
  m.def(
      "num_threads",
      [] {
#if defined(_OPENMP)
        return omp_get_max_threads();
#else
        return 1;
#endif
      },
      "Threads a step uses (OpenMP's; torch.set_num_threads sets the same number when PyTorch "
      "shares the OpenMP runtime).");
  m.def(
      "check_array",
      [](nb::handle x, const std::string& name, bool writable) {
        return reinterpret_cast<std::uintptr_t>(hgpy::take_array(x, name, writable).data);
      },
      "x"_a, "name"_a = "x", "writable"_a = true,
      "Checks x by the plans' rules (an array of float32 or float64 in host memory, "
      "C-contiguous, writable when asked), raising the error a plan would, and returns the "
      "address of its first element as the kernels see it (the zero-copy tests compare it with "
      "the caller's).");
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() =
      "heterograd's fused optimizer kernels over the caller's arrays (DLPack / buffer protocol, "
      "zero-copy), the hyper-parameter structs and learning-rate schedules. heterograd.optim "
      "builds torch.optim optimizers on it; simulate() runs the simulator (heterograd.sim).";
  hgpy::bind_schedules(m);
  hgpy::bind_configs(m);
  bind_plans(m);
  bind_build(m);
  hgpy::simpy::bind_sim_module(m);
  hgpy::bind_distributed(m);
  m.def("reference_run", &hgpy::reference_run, "kind"_a, "config"_a, "params"_a, "grads"_a,
        "slots"_a,
        "For tests: the C++ optimizer `kind` (sgd, momentum, nesterov, adam, adamw, adagrad, "
        "lamb) from a fresh state, one update() per element of grads, on a copy of params; "
        "writes the final params into params and the state's slots into slots; returns the "
        "state's count.");
}
