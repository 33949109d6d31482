// heterograd.distributed's C++ side: the asynchronous parameter server of runtime/server.hpp
// (serve on rank 0, worker_client on the other ranks) over heterograd's MPI transport, for a
// PyTorch model whose parameters and gradients the Python side has laid over two flat float32
// buffers. A thin client: the server policy comes from sim_models.hpp's method list (the
// library's described configurations), the server, its clock and its records are the
// library's; this file checks arguments, starts MPI when mpirun started the process, releases
// the GIL around every blocking call, and turns the summary into a dict.
//
// Beyond serve / pull / push, one message is this binding's: when the run is over the server
// sends its final model to every worker (tag tag_base + 4, after the protocol's four), so that
// every rank leaves the run holding the same parameters.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "heterograd/core/hash.hpp"
#include "heterograd/optim/optimizers.hpp"
#include "sim_models.hpp"

#if defined(HG_HAS_MPI)
#include "heterograd/comm/mpi.hpp"
#include "heterograd/runtime/server.hpp"
#include "mpi_start.hpp"
#endif

namespace hgpy::distpy {

namespace nb = nanobind;
using namespace nb::literals;
using simpy::for_each_method;

// LocalSGD's side (local_sgd.cpp).
void bind_local_sgd(nb::module_& m);

/// The server methods' names (round methods have no parameter server), for errors.
inline std::string server_method_names() {
  std::string s;
  for_each_method([&](const auto& m) { s += (s.empty() ? "" : ", ") + std::string(m.name); });
  return s;
}

/// Calls f(m) for the server method named `name`; ValueError naming `method` otherwise.
template <class F>
void with_server_method(const std::string& name, F&& f) {
  bool found = false;
  for_each_method([&](const auto& m) {
    if (!found && name == m.name) {
      found = true;
      f(m);
    }
  });
  if (!found) value_rule("method", "'" + name + "'", "must be one of " + server_method_names());
}

/// The run's settings, checked on every rank before MPI is touched: a broken rule then fails
/// every rank alike, instead of leaving the others waiting for a server that never starts.
struct settings {
  std::string method;
  nb::object config;  // the policy's parameters (a dict), checked by the method's description
  heterograd::optim::schedule lr{0.01};
  std::uint64_t max_updates = 0;  // 0: no cap
  double horizon = 0;             // real seconds; 0: none
  double timeout = 120;
  double shutdown_grace = 60;

  nb::dict check() const {
    nb::dict out;
    with_server_method(method, [&](const auto& m) {
      using C = typename std::remove_cvref_t<decltype(m)>::config_type;
      out = simpy::config_dict(simpy::config_from<C>(method, config));
    });
    lr.validate("lr");
    if (max_updates == 0 && !(horizon > 0))
      value_rule("max_updates", "None",
                 "must be given (> 0) unless horizon (real seconds) is > 0: the server needs a "
                 "stopping rule");
    if (!(std::isfinite(horizon) && horizon >= 0))
      value_rule("horizon", heterograd::detail::format_value(horizon),
                 "must be finite and >= 0 (0: none)");
    if (!(std::isfinite(timeout) && timeout > 0))
      value_rule("timeout", heterograd::detail::format_value(timeout),
                 "must be finite and > 0 (seconds)");
    if (!(std::isfinite(shutdown_grace) && shutdown_grace >= 0))
      value_rule("shutdown_grace", heterograd::detail::format_value(shutdown_grace),
                 "must be finite and >= 0 (seconds)");
    return out;
  }
};

/// The caller's parameter tensors, checked by the plans' rules (host memory, C-contiguous,
/// writable) and float32 (the flat buffer's element type); returns their sizes. `who` names
/// them in errors (ParameterServer, LocalSGD).
inline std::vector<std::size_t> check_params(nb::handle params, const std::string& who) {
  const namer name{who, nb::none()};
  const auto refs = take_list(params, "params", name, true, nullptr, "");
  if (refs.empty()) value_rule(who + ".params", "an empty list", "must hold at least one tensor");
  std::vector<std::size_t> sizes;
  for (std::size_t k = 0; k < refs.size(); ++k) {
    if (refs[k].type != element::f32)
      type_rule(name("params", k), "dtype float64",
                "must be float32 (the element type of heterograd.distributed's flat buffer)");
    sizes.push_back(refs[k].size);
  }
  return sizes;
}

inline std::uint64_t hash_of(nb::handle x) {
  const array_ref r = take_array(x, "x", false);
  return heterograd::fnv1a(r.data,
                           r.size * (r.type == element::f32 ? sizeof(float) : sizeof(double)));
}

#if defined(HG_HAS_MPI)

namespace hr = heterograd::runtime;
namespace hmpi = heterograd::comm::mpi;

/// The summary of a run on the server rank, as a dict.
inline nb::dict summary_dict(const hr::remote_summary& s, std::uint64_t version, std::uint64_t hash,
                             std::size_t workers) {
  nb::dict d;
  d["updates"] = version;
  d["results"] = s.arrivals;
  d["dropped"] = s.dropped;
  d["refused"] = s.refused;
  d["abandoned"] = s.abandoned;
  d["end_time"] = s.end_time;
  d["jobs_sent"] = s.jobs_sent;
  d["jobs_finished"] = s.jobs_finished;
  d["evicted"] = s.evicted;
  nb::dict staleness;
  for (std::size_t o = 0; o < heterograd::sim::update_outcome_count; ++o) {
    const auto outcome = static_cast<heterograd::sim::update_outcome>(o);
    std::vector<std::uint64_t> per(workers);
    for (std::size_t w = 0; w < workers; ++w)
      per[w] = s.log.count(static_cast<heterograd::sim::worker_id>(w), outcome);
    d[heterograd::sim::to_string(outcome)] = per;
    staleness[heterograd::sim::to_string(outcome)] = s.log.staleness_histogram(outcome);
  }
  d["staleness"] = staleness;
  d["hash"] = hash;
  return d;
}

/// One ParameterServer's MPI side: the communicator, and on a worker rank the client.
class session {
 public:
  session(settings s, nb::handle flat, nb::handle grads) : s_(std::move(s)) {
    s_.check();
    params_ = take_array(flat, "flat", true);
    grads_ = take_array(grads, "grads", true);
    if (params_.type != element::f32) type_rule("flat", "dtype float64", "must be float32");
    if (grads_.type != element::f32) type_rule("grads", "dtype float64", "must be float32");
    if (grads_.size != params_.size)
      value_rule("grads", std::to_string(grads_.size) + " elements",
                 "must have as many as flat (" + std::to_string(params_.size) + ")");
    init_mpi();
    nb::gil_scoped_release unlocked;
    comm_ = hmpi::communicator(MPI_COMM_WORLD);  // a collective: every rank makes its session here
    if (comm_.size() < 2)
      throw std::runtime_error(
          "heterograd.distributed: mpirun started 1 process: a parameter server needs at least 2 "
          "(rank 0 serves, "
          "the others compute)");
    o_.timeout = heterograd::seconds{s_.timeout};
    o_.shutdown_grace = heterograd::seconds{s_.shutdown_grace};
    if (s_.max_updates) o_.max_updates = s_.max_updates;
    if (s_.horizon > 0) o_.horizon = s_.horizon;
    o_.validate();
    if (comm_.rank() != o_.server_rank) client_.emplace(comm_, params_.size, o_);
  }

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  bool is_server() const { return !client_; }
  bool running() const { return !stopped_; }

  /// Rank 0: runs the server until its stopping rule, writes the final model into flat,
  /// sends it to every worker and returns the summary.
  nb::dict serve() {
    if (!is_server())
      throw std::runtime_error("heterograd.distributed: serve() runs on rank 0 only");
    if (stopped_)
      throw std::runtime_error("heterograd.distributed: serve() runs once per ParameterServer");
    stopped_ = true;
    nb::dict out;
    with_server_method(s_.method, [&](const auto& m) { out = serve_with(m); });
    return out;
  }

  /// A worker: waits for the next job and writes its model into flat (the model's own
  /// tensors); false when the run is over (flat then holds the server's final model).
  bool pull() {
    if (!client_) return false;
    if (stopped_) return false;
    nb::gil_scoped_release unlocked;
    float* x = static_cast<float*>(params_.data);
    if (client_->pull(heterograd::span<float>(x, params_.size))) return true;
    stopped_ = true;
    comm_
        .recv(heterograd::span<float>(x, params_.size), o_.server_rank, o_.tag_base + 4,
              heterograd::comm::recv_options{.timeout = o_.timeout})
        .wait();
    return false;
  }

  /// A worker: sends grads for the job last pulled; false (nothing sent) when the server has
  /// moved on (the job was interrupted or the run is over).
  bool push() {
    if (!client_ || stopped_) return false;
    nb::gil_scoped_release unlocked;
    const float* g = static_cast<const float*>(grads_.data);
    return client_->push(heterograd::span<const float>(g, grads_.size));
  }

 private:
  template <class M>
  nb::dict serve_with(const M& m) {
    using C = typename M::config_type;
    const C cfg = simpy::config_from<C>(s_.method, s_.config);
    const std::size_t n = static_cast<std::size_t>(comm_.size() - 1);
    float* x = static_cast<float*>(params_.data);
    heterograd::algorithms::async::model_server<float> server(
        std::vector<float>(x, x + params_.size),
        heterograd::optim::sgd(heterograd::optim::sgd_config{.lr = s_.lr}));
    auto policy = m.make(n, std::move(server), cfg);
    hr::remote_summary sum;
    std::uint64_t sent = 0;
    {
      nb::gil_scoped_release unlocked;
      sum = hr::serve<float>(policy, comm_, o_);
      const auto p = policy.params();
      std::copy(p.begin(), p.end(), x);
      sent = send_final(x);
    }
    nb::dict d =
        summary_dict(sum, policy.version(), heterograd::fnv1a(x, params_.size * sizeof(float)), n);
    d["final_model_sent"] = sent;
    return d;
  }

  // Every worker receives the final model after its stop; a worker that is gone (evicted,
  // abandoned) lets its send time out, counted by what this returns.
  std::uint64_t send_final(const float* x) {
    std::vector<decltype(comm_.send(heterograd::span<const float>(x, 1), 1, 0))> reqs;
    for (int r = 0; r < comm_.size(); ++r)
      if (r != o_.server_rank)
        reqs.push_back(comm_.send(heterograd::span<const float>(x, params_.size), r,
                                  o_.tag_base + 4,
                                  heterograd::comm::send_options{.timeout = o_.timeout}));
    std::uint64_t ok = 0;
    for (auto& q : reqs) {
      try {
        q.wait();
        ++ok;
      } catch (const heterograd::comm::comm_error&) {
      }
    }
    return ok;
  }

  settings s_;
  array_ref params_, grads_;
  hmpi::communicator comm_;
  hr::remote_options o_;
  std::optional<hr::worker_client<float, hmpi::communicator>> client_;
  bool stopped_ = false;
};

#endif  // HG_HAS_MPI

inline void bind(nb::module_& m) {
  bind_local_sgd(m);
#if defined(HG_HAS_MPI)
  m.attr("mpi") = true;
  nb::class_<session>(
      m, "DistSession",
      "One ParameterServer's MPI side (heterograd.distributed.ParameterServer drives it).")
      .def(
          "__init__",
          [](session* p, const std::string& method, nb::object config,
             heterograd::optim::schedule lr, std::uint64_t max_updates, double horizon,
             double timeout, double shutdown_grace, nb::handle flat, nb::handle grads) {
            new (p) session(settings{method, std::move(config), lr, max_updates, horizon, timeout,
                                     shutdown_grace},
                            flat, grads);
          },
          "method"_a, "config"_a.none(), "lr"_a, "max_updates"_a, "horizon"_a, "timeout"_a,
          "shutdown_grace"_a, "flat"_a, "grads"_a,
          "Checks everything, starts MPI if mpirun started this process, and makes the "
          "communicator (a "
          "collective: every rank at once); a worker rank's client posts its first receive.")
      .def_prop_ro("rank", &session::rank)
      .def_prop_ro("size", &session::size)
      .def_prop_ro("is_server", &session::is_server)
      .def_prop_ro("running", &session::running)
      .def("serve", &session::serve, "Rank 0: runs the server (GIL released); returns the summary.")
      .def("pull", &session::pull,
           "A worker: the next job's model into flat (GIL released); False: over.")
      .def("push", &session::push,
           "A worker: grads of the job pulled (GIL released); False: not sent.");
  m.def("dist_finalize", &finalize_mpi,
        "MPI_Finalize, if this module initialised MPI and nobody finalized it.");
#else
  m.attr("mpi") = false;
  m.def("dist_finalize", [] {});
#endif
  m.def(
      "dist_check",
      [](const std::string& method, nb::object config, heterograd::optim::schedule lr,
         std::uint64_t max_updates, double horizon, double timeout, double shutdown_grace) {
        return settings{method,  std::move(config), lr, max_updates, horizon,
                        timeout, shutdown_grace}
            .check();
      },
      "method"_a, "config"_a.none(), "lr"_a, "max_updates"_a, "horizon"_a, "timeout"_a,
      "shutdown_grace"_a,
      "Checks a parameter server's settings (the method, its parameters by the library's "
      "descriptions, lr, the "
      "stopping rule); returns the method's configuration with its defaults.");
  m.def("dist_check_params", &check_params, "params"_a, "who"_a = "ParameterServer",
        "Checks parameter tensors (float32, host memory, C-contiguous, writable); returns their "
        "sizes.");
  m.def(
      "dist_methods",
      [] {
        nb::list out;
        for_each_method([&](const auto& x) {
          using C = typename std::remove_cvref_t<decltype(x)>::config_type;
          out.append(
              nb::make_tuple(std::string(x.name), std::string(x.title), simpy::config_fields<C>()));
        });
        return out;
      },
      "The parameter server's methods (the simulator's server policies): (name, title, [(field, "
      "default, meaning, rule)]).");
  m.def("dist_hash", &hash_of, "x"_a, "FNV-1a of an array's bytes (the run's model hashes).");
}

}  // namespace hgpy::distpy

namespace hgpy {
// heterograd.distributed (module.cpp calls it).
void bind_distributed(nanobind::module_& m) {
  distpy::bind(m);
}
}  // namespace hgpy
