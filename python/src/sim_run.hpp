#pragma once
// heterograd.sim's run: the library's simulated parameter server (runtime/sim.hpp,
// async_runtime) with a server policy (sim_models.hpp), a worker-time model, and a gradient
// computed by a Python callable grad(x, worker, job) or by a built-in C++ problem.
//
// The event loop runs with the GIL released; a Python callback takes it for the call only.
// x is a read-only numpy view of the server's parameters (no copy; it is the model at the
// job's start, and changes as the run goes on: copy it to keep it; every call of a run gets
// the same view object). The returned array is
// checked (an array of x0's shape, float32 or float64, C-contiguous, in host memory) and
// copied, rounded to x0's dtype; non-finite entries meet the server's non-finite policy
// (fail / skip / zero). A broken rule or an exception in a callback stops the run: the Python
// exception is raised by simulate() (with a note naming the callback, worker and job), and
// nothing the caller holds has changed (x0 is copied; results exist only for a finished run).
// Signals (Ctrl-C) are checked in every callback and every 1024 built-in gradients.

#include <nanobind/ndarray.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arrays.hpp"
#include "heterograd/algorithms/nonfinite.hpp"
#include "heterograd/data/synthetic.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "heterograd/runtime/sim.hpp"
#include "sim_models.hpp"

namespace hgpy::simpy {

namespace hr = heterograd::runtime;
using hsim::worker_id;

// ---- built-in problems ---------------------------------------------------------------------

/// A gradient computed in C++, as heterograd-run's synthetic problems compute it: in double,
/// rounded to the run's dtype once. f_i = (x - c_i)^2 / 2 (E1), or the worst-case quadratic
/// of Ringmaster ASGD (E2; data/synthetic.hpp), without noise.
struct problem {
  std::string name;
  std::vector<double> centers;  // scalar_quadratics: c_i, one per worker
  std::optional<heterograd::data::worst_case_quadratic> quadratic;

  std::size_t dim() const { return quadratic ? quadratic->dim : 1; }
  template <class T>
  void gradient(worker_id w, heterograd::span<const T> x, T* g, std::vector<double>& scratch) const {
    if (!quadratic) {
      g[0] = static_cast<T>(x[0] - centers[w]);
      return;
    }
    const std::size_t d = quadratic->dim;
    scratch.resize(2 * d);
    for (std::size_t j = 0; j < d; ++j) scratch[j] = x[j];
    quadratic->gradient(heterograd::span<const double>(scratch.data(), d),
                        heterograd::span<double>(scratch.data() + d, d));
    for (std::size_t j = 0; j < d; ++j) g[j] = static_cast<T>(scratch[d + j]);
  }
};

inline void bind_problems(nb::module_& m) {
  nb::class_<problem>(m, "Problem", "A gradient computed in C++ (a built-in problem): pass it as grad.")
      .def_ro("name", &problem::name)
      .def_prop_ro("dim", &problem::dim)
      .def("__repr__", [](const problem& p) { return p.name; });
  m.def("scalar_quadratics", [](std::vector<double> c) {
    if (c.empty()) value_rule("scalar_quadratics.centers", "[]", "must hold one centre per worker");
    return problem{"scalar_quadratics(" + list_text(c) + ")", std::move(c), std::nullopt};
  }, "centers"_a, "f_i(x) = (x - c_i)^2 / 2 on one coordinate, worker i's gradient x - c_i (E1).");
  m.def("worst_case_quadratic", [](std::size_t dim, double smoothness) {
    return problem{"worst_case_quadratic(" + std::to_string(dim) + ", " +
                       heterograd::detail::format_value(smoothness) + ")",
                   {}, heterograd::data::worst_case_quadratic(dim, smoothness)};
  }, "dim"_a, "smoothness"_a = 1.0,
  "Ringmaster ASGD's worst-case quadratic: gradient A x - b, A = (L/4) tridiag(-1, 2, -1), "
  "b = -(L/4) e_1 (no noise).");
}

// ---- one run's callbacks -------------------------------------------------------------------

/// Thrown through the library's event loop when a callback failed; the Python error waits in
/// the context until the GIL is held again.
struct callback_failed {};

inline std::string shape_text(const std::vector<std::size_t>& s) {
  std::string r = "(";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

[[noreturn]] inline void raise(PyObject* type, const std::string& name, const std::string& value,
                               const std::string& rule) {
  // An exception object (not a message for Python to build one from later): the note below
  // needs the instance.
  const nb::object e = nb::handle(type)(heterograd::invalid_argument_message(name, value, rule));
  PyErr_SetObject(type, e.ptr());
  throw nb::python_error();
}

template <class T>
class run_context {
 public:
  std::vector<std::size_t> shape;
  std::size_t dim = 0;
  nb::object grad, eval;    // Python callables (grad unset: `builtin` computes)
  const problem* builtin = nullptr;
  nb::object owner;         // owns the policy: the views' base object
  std::optional<nb::python_error> error;
  std::vector<T> trajectory;
  std::vector<double> metrics;
  std::size_t metric_count = 0;
  std::uint64_t evaluations = 0;

  /// compute(worker, version, job, out) of the runtime, at parameters x.
  void gradient(worker_id w, std::uint64_t k, heterograd::span<const T> x, std::vector<T>& out) {
    out.resize(dim);
    gradient_into(w, k, x, heterograd::span<T>(out.data(), dim));
  }
  /// The same into dim elements at out (the round methods' oracle).
  void gradient_into(worker_id w, std::uint64_t k, heterograd::span<const T> x, heterograd::span<T> out) {
    if (builtin) {
      builtin->gradient(w, x, out.data(), scratch_);
      if ((++calls_ & 1023) == 0) check_signals();
      return;
    }
    nb::gil_scoped_acquire gil;
    guarded("grad", w, k, [&] { take_gradient(grad(view(x), w, k), w, k, out.data()); });
  }

  /// The runtime's evaluation at virtual time t: x into the trajectory, eval(x) into metrics.
  std::vector<double> evaluate(double t, heterograd::span<const T> x) {
    trajectory.insert(trajectory.end(), x.begin(), x.end());
    ++evaluations;
    if (!eval.is_valid() || eval.is_none()) return {};
    nb::gil_scoped_acquire gil;
    std::vector<double> v;
    guarded("eval", 0, 0, [&] {
      const nb::object r = eval(view(x));
      const std::string name = "eval(x) at t=" + heterograd::detail::format_value(t);
      double s = 0;
      if (nb::try_cast(r, s)) v.assign(1, s);
      else if (!nb::try_cast(r, v))
        raise(PyExc_TypeError, name, py_repr(r), "must return a number or a sequence of numbers");
      if (evaluations > 1 && v.size() != metric_count)
        raise(PyExc_ValueError, name, std::to_string(v.size()) + " values",
              "must return as many values as at the first evaluation (" + std::to_string(metric_count) + ")");
      metric_count = v.size();
    });
    metrics.insert(metrics.end(), v.begin(), v.end());
    return v;
  }

 private:
  std::vector<double> scratch_;
  std::uint64_t calls_ = 0;

  nb::object view_;  // made once: the server's parameters never move during a run

  nb::object view(heterograd::span<const T> x) {
    if (!view_.is_valid() || view_data_ != x.data()) {
      view_ = nb::ndarray<nb::numpy, const T>(x.data(), shape.size(), shape.data(), owner).cast();
      view_data_ = x.data();
    }
    return view_;
  }
  const T* view_data_ = nullptr;

  // Runs f (GIL held); a Python error gets a note naming the callback and is kept for
  // simulate() to raise, and the event loop is left.
  template <class F>
  void guarded(const char* what, worker_id w, std::uint64_t k, F&& f) {
    try {
      f();
    } catch (nb::python_error& e) {
      const nb::handle v = e.value();
      // (Before Python 3.12 an error set by C code may be a type without an instance yet:
      // KeyboardInterrupt from the signal handler. It is raised as it is, without a note.)
      if (v.is_valid() && PyExceptionInstance_Check(v.ptr()) && nb::hasattr(v, "add_note")) {
        const std::string where = std::string(what) == "grad"
            ? "worker " + std::to_string(w) + ", job " + std::to_string(k) : std::string("an evaluation");
        v.attr("add_note")("heterograd.sim: raised in the callback '" + std::string(what) + "' (" + where + ")");
      }
      error.emplace(std::move(e));
      throw callback_failed{};
    }
  }

  void check_signals() {
    nb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) {
      error.emplace();
      throw callback_failed{};
    }
  }

  // The callback's result r, checked, into out (rounded to T).
  // Fast path: a C-contiguous float32 / float64 buffer of x0's shape (a numpy array), read
  // through the buffer protocol with no allocation. Anything else takes check_gradient's path,
  // which accepts DLPack objects too and names what is wrong.
  void take_gradient(const nb::object& r, worker_id w, std::uint64_t k, T* out) const {
    Py_buffer b;
    if (PyObject_GetBuffer(r.ptr(), &b, PyBUF_FORMAT | PyBUF_ND) != 0) {
      PyErr_Clear();
      return check_gradient(r, w, k, out);
    }
    const char* f = b.format ? b.format : "B";
    if (*f == '@' || *f == '=' || *f == '<') ++f;  // native order (checked: little-endian hosts)
    bool ok = (f[0] == 'd' || f[0] == 'f') && f[1] == '\0' && std::endian::native == std::endian::little &&
              static_cast<std::size_t>(b.ndim) == shape.size();
    for (std::size_t i = 0; ok && i < shape.size(); ++i) ok = static_cast<std::size_t>(b.shape[i]) == shape[i];
    if (ok) {
      if (f[0] == 'd') copy(static_cast<const double*>(b.buf), out);
      else copy(static_cast<const float*>(b.buf), out);
    }
    PyBuffer_Release(&b);
    if (!ok) check_gradient(r, w, k, out);
  }

  // The general path: any array (DLPack or buffer protocol), every rule checked by name.
  void check_gradient(const nb::object& r, worker_id w, std::uint64_t k, T* out) const {
    const std::string name = "grad(x, worker=" + std::to_string(w) + ", job=" + std::to_string(k) + ")";
    const std::string want = "x0's shape " + shape_text(shape);
    nb::ndarray<nb::ro> a;
    if (!nb::try_cast(r, a, false))
      raise(PyExc_TypeError, name, "a " + std::string(nb::type_name(r.type()).c_str()),
            "must return a numpy array of " + want + " and dtype float32 or float64");
    std::vector<std::size_t> got(a.ndim());
    for (std::size_t i = 0; i < got.size(); ++i) got[i] = a.shape(i);
    if (got != shape)
      raise(PyExc_ValueError, name, "an array of shape " + shape_text(got), "must have " + want);
    if (!runs_on(a.device_type()))
      raise(PyExc_ValueError, name, "an array on " + device_name(a.device_type()), "must be in host memory");
    if (!c_contiguous(a))
      raise(PyExc_ValueError, name, "a non-contiguous array", "must be C-contiguous (np.ascontiguousarray)");
    if (a.dtype() == nb::dtype<float>()) copy(static_cast<const float*>(a.data()), out);
    else if (a.dtype() == nb::dtype<double>()) copy(static_cast<const double*>(a.data()), out);
    else raise(PyExc_TypeError, name, "dtype " + dtype_name(a.dtype()), "must be float32 or float64");
  }
  template <class S>
  void copy(const S* p, T* out) const {
    for (std::size_t i = 0; i < dim; ++i) out[i] = static_cast<T>(p[i]);
  }
};

/// Runs `run` (the library's event loop) with the GIL released; a callback's failure, kept in
/// ctx while the loop unwound, is raised once the GIL is held again.
template <class T, class Run>
void run_released(run_context<T>& ctx, Run&& run) {
  bool failed = false;
  {
    nb::gil_scoped_release release;
    try {
      run();
    } catch (callback_failed&) {
      failed = true;
    }
  }
  if (failed) throw nb::python_error(*ctx.error);
}

// ---- what simulate() was given, and what a run returns ------------------------------------

/// What simulate() was given, checked.
struct sim_args {
  std::string method;
  nb::object config, grad, eval;
  const problem* builtin = nullptr;
  time_model times;
  std::size_t workers = 0;
  double horizon = 0, eval_interval = 0;
  std::uint64_t max_events = 0;
  heterograd::optim::schedule lr;
  heterograd::algorithms::nonfinite_policy nonfinite = heterograd::algorithms::nonfinite_policy::fail;
  std::vector<std::size_t> shape;
};

template <class X>
nb::object to_numpy(std::vector<X> v, std::vector<std::size_t> shape) {
  auto* h = new std::vector<X>(std::move(v));
  nb::capsule own(h, [](void* q) noexcept { delete static_cast<std::vector<X>*>(q); });
  return nb::ndarray<nb::numpy, X>(h->data(), shape.size(), shape.data(), own).cast();
}

/// What every run reports: x, the evaluations, per-worker outcomes and times, staleness.
template <class T>
nb::dict common_results(const hsim::recorder& rec, heterograd::span<const T> x, run_context<T>& ctx,
                        const sim_args& a) {
  const std::size_t n = a.workers;
  nb::dict d;
  d["x"] = to_numpy(std::vector<T>(x.begin(), x.end()), a.shape);
  std::vector<double> times;
  for (const auto& e : rec.evaluations()) times.push_back(e.time);
  const std::size_t m = times.size();
  std::vector<std::size_t> tshape{m};
  tshape.insert(tshape.end(), a.shape.begin(), a.shape.end());
  d["times"] = to_numpy(std::move(times), {m});
  d["trajectory"] = to_numpy(std::move(ctx.trajectory), tshape);
  d["metrics"] = to_numpy(std::move(ctx.metrics), {m, ctx.metric_count});
  nb::dict staleness;
  for (std::size_t o = 0; o < hsim::update_outcome_count; ++o) {
    const auto outcome = static_cast<hsim::update_outcome>(o);
    std::vector<std::uint64_t> per(n);
    for (std::size_t w = 0; w < n; ++w) per[w] = rec.count(static_cast<worker_id>(w), outcome);
    d[hsim::to_string(outcome)] = to_numpy(std::move(per), {n});
    const auto& h = rec.staleness_histogram(outcome);
    staleness[hsim::to_string(outcome)] = to_numpy(std::vector<std::uint64_t>(h), {h.size()});
  }
  d["staleness"] = staleness;
  std::vector<std::uint64_t> finished(n), cancelled(n);
  std::vector<double> busy(n), idle(n), waiting(n);
  for (std::size_t w = 0; w < n; ++w) {
    const auto& s = rec.worker(static_cast<worker_id>(w));
    finished[w] = s.jobs_finished;
    cancelled[w] = s.jobs_cancelled;
    busy[w] = s.busy;
    idle[w] = s.idle;
    waiting[w] = s.waiting;
  }
  d["jobs_finished"] = to_numpy(std::move(finished), {n});
  d["jobs_cancelled"] = to_numpy(std::move(cancelled), {n});
  d["busy"] = to_numpy(std::move(busy), {n});
  d["idle"] = to_numpy(std::move(idle), {n});
  d["waiting"] = to_numpy(std::move(waiting), {n});
  d["end_time"] = rec.end_time();
  d["events"] = rec.events();
  d["trace_hash"] = rec.trace_hash();
  return d;
}

/// A server run's results: the common ones, the server's version and non-finite skips.
template <class T, class Policy, class Runtime>
nb::dict results(const Policy& p, const Runtime& rt, run_context<T>& ctx, const sim_args& a) {
  nb::dict d = common_results<T>(rt.recorder(), p.params(), ctx, a);
  d["updates"] = p.version();
  d["nonfinite_skipped"] = p.server().nonfinite_skipped();
  return d;
}

/// A round run's results: x is the anchor (the last global synchronisation's model), updates
/// the rounds completed.
template <class T, class Policy, class Runtime>
nb::dict round_results(const Policy& p, const Runtime& rt, run_context<T>& ctx, const sim_args& a) {
  const auto& x = p.anchor();
  nb::dict d = common_results<T>(rt.recorder(), heterograd::span<const T>(x.data(), x.size()), ctx, a);
  d["updates"] = p.rounds();
  d["nonfinite_skipped"] = 0;
  return d;
}

}  // namespace hgpy::simpy
