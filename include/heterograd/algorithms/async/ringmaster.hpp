#pragma once
// Ringmaster ASGD (Maranjyan, Tyurin, Richtarik, "Ringmaster ASGD: The First Asynchronous SGD
// with Optimal Time Complexity", ICML 2025). A delay threshold R caps staleness:
//
//   discard variant (Alg. 4, "without calculation stops"): on arrival of g with delay
//     delta = k - v:  delta < R: x <- x - gamma g, k <- k + 1;  else: g is discarded.
//     The worker restarts at the current x either way.
//   interrupt variant (Alg. 5, "with calculation stops", what the authors' simulator runs):
//     every arrival is applied; after each update, every worker whose computation has
//     fallen R versions behind (k - v_j >= R) is stopped and restarted at the current x, so
//     no applied gradient has delay >= R and no time is spent on gradients that would be
//     thrown away.
//
// R needs no knowledge of worker speeds; the theory sets R = max{1, ceil(sigma^2 / eps)},
// gamma = min{1/(2RL), eps/(4 L sigma^2)}; the authors' tuned MLP run uses R = 6, gamma = 1.
// R = infinite_delay is vanilla ASGD, bit for bit (tested). R = 0 would discard everything
// and is rejected.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <iterator>
#include <utility>
#include <vector>

#include "heterograd/algorithms/async/server.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::async {

enum class ringmaster_variant : std::uint8_t {
  discard,    ///< Alg. 4: stale gradients (delay >= R) are dropped on arrival
  interrupt,  ///< Alg. 5: computations R versions behind are stopped and restarted
};

inline constexpr choice<ringmaster_variant> ringmaster_variants[] = {
    {"discard", ringmaster_variant::discard}, {"interrupt", ringmaster_variant::interrupt}};

struct ringmaster_config {
  std::uint64_t threshold = 6;  ///< R (the authors' tuned MLP value); infinite_delay: no cap
  ringmaster_variant variant = ringmaster_variant::discard;

  static constexpr auto description() {
    return describe(
        "ringmaster_config",
        describe_field("threshold", &ringmaster_config::threshold,
                       "R: delay threshold (gradients this many versions old are stale)",
                       with_note(at_least(1), "(R = 0 would discard every gradient)")),
        describe_field("variant", &ringmaster_config::variant,
                       "discard stale gradients on arrival (Alg. 4), or interrupt stale "
                       "computations (Alg. 5)",
                       ringmaster_variants));
  }
  void validate() const { validate_fields(*this); }
};

template <class T = double, class Optimizer = default_optimizer, class Memory = host_memory>
class ringmaster_asgd : public detail::policy_base<T, Optimizer, Memory> {
  using base = detail::policy_base<T, Optimizer, Memory>;

 public:
  ringmaster_asgd(std::size_t workers, model_server<T, Optimizer, Memory> server,
                  ringmaster_config config = {})
      : base(workers, std::move(server)), config_((config.validate(), config)),
        started_(workers, 0) {
    // Every worker starts at the initial version (the runtimes' default start).
    for (std::size_t w = 0; w < workers; ++w) queue_.push_back({this->version(), w});
  }

  const ringmaster_config& config() const { return config_; }

  template <class Ctl, class Arrival, class G>
  void on_arrival(Ctl& ctl, const Arrival& a, const G& g) {
    const auto in = this->admit(ctl, a, g, "ringmaster_asgd");
    if (!in) {  // skipped (non-finite): like a discard, the worker restarts at the current x
      note_restart(a.worker);
      return;
    }
    const std::uint64_t delay = in->delay;
    if (delay >= config_.threshold) {
      // Discard variant; in the interrupt variant only a runtime that could not stop the
      // job in time delivers one, and it is dropped the same way.
      ctl.discarded(a.worker, delay);
      note_restart(a.worker);
      return;
    }
    this->server_.apply(in->gradient);
    ctl.applied(a.worker, delay);
    note_restart(a.worker);
    if (config_.variant == ringmaster_variant::interrupt) stop_stale(ctl);
  }

  /// Membership (docs/elastic.md): a leaver's job is forgotten (policy_base::on_leave; a
  /// late result a runtime still delivers is dropped by admit, never applied); R bounds the
  /// delay of every applied gradient whoever the members are. A joiner starts at the current
  /// version, like a restart.
  template <class Ctl>
  void on_join(Ctl&, worker_id w) {
    this->mark_join(w);
    note_restart(w);
  }
  friend bool operator==(const ringmaster_asgd& a, const ringmaster_asgd& b) {
    return a.server_ == b.server_ && a.same_membership(b) && a.started_ == b.started_;
  }

  /// Checkpointing (core/archive.hpp): the mutable state; the configuration is rebuilt.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(this->server_, started_, queue_);
    this->serialize_membership(ar);
  }

 private:
  struct start_record {
    std::uint64_t version;
    std::size_t worker;
  };

  // The arriving worker restarts at the current version when on_arrival returns.
  void note_restart(worker_id w) {
    started_[w] = this->version();
    if (config_.variant == ringmaster_variant::interrupt) queue_.push_back({this->version(), w});
  }

  // Workers restart in non-decreasing version order, so the stale ones are at the front of
  // the queue: O(1) amortised per update instead of a scan of all n workers. A record is
  // current only if the worker has not restarted since (its start version still matches).
  template <class Ctl>
  void stop_stale(Ctl& ctl) {
    const std::uint64_t k = this->version();
    while (!queue_.empty() && k - queue_.front().version >= config_.threshold) {
      const start_record r = queue_.front();
      queue_.pop_front();
      const auto w = static_cast<worker_id>(r.worker);
      if (started_[r.worker] != r.version || !ctl.busy(w) || ctl.version_of(w) != r.version)
        continue;
      ctl.interrupt(w);  // recorded by the runtime as interrupted; w restarts at k
      started_[r.worker] = k;
      queue_.push_back({k, r.worker});
    }
  }

  ringmaster_config config_;
  std::vector<std::uint64_t> started_;  // version each worker's current job started at
  std::deque<start_record> queue_;      // interrupt variant: starts in version order
};
template <class T, class O, class M>
ringmaster_asgd(std::size_t, model_server<T, O, M>) -> ringmaster_asgd<T, O, M>;
template <class T, class O, class M>
ringmaster_asgd(std::size_t, model_server<T, O, M>, ringmaster_config) -> ringmaster_asgd<T, O, M>;

}  // namespace heterograd::algorithms::async
