#pragma once
// Gradient-table methods for heterogeneous data (f = (1/n) sum_i f_i, worker i samples only
// f_i). A table keeps one entry per worker so that every worker's data weighs 1/n in every
// step, however often it arrives. From Maranjyan & Richtarik, "Ringleader ASGD: The First
// Asynchronous SGD with Optimal Time Complexity under Data Heterogeneity" (ICLR 2026), and
// the baselines it builds on:
//
// IA^2SGD: table G[i] = worker i's latest gradient. On arrival of g from i:
//     G[i] <- g ;  x <- x - gamma (1/n) sum_j G[j] ;  i restarts.
//   Never idle, never discards; a slow worker's entry can be arbitrarily old. The first step
//   waits until every G[i] holds a gradient (warm_up; see below).
//
// Malenia SGD (Tyurin & Richtarik, "Optimal Time Complexities of Parallel Stochastic
// Optimization Methods Under a Fixed Computation Model", NeurIPS 2023): rounds at a fixed
//   point x. Workers compute at x; arrivals computed at x enter a running mean per worker
//   (count b_i); older ones are discarded. When every b_i >= 1 and the harmonic mean
//   B = ((1/n) sum 1/b_i)^{-1} >= S:  x <- x - gamma (1/n) sum_i mean_i ; the table empties
//   and every computation still running at the old x is stopped and restarted at the new one
//   (stop_stale; the authors' simulator resets all workers each round).
//
// Ringleader ASGD: IA^2SGD's table with Malenia's rounds and Ringmaster's delay control.
//   Tables CURRENT and NEXT hold running means (counts b_i). A round:
//   Phase 1 (gather): arrivals are averaged into CURRENT[i]; no update, until every worker
//     has >= 1 gradient in CURRENT.
//   Phase 2 (n updates): the arrival that completes the table, then every arrival from a
//     worker that has not yet triggered an update this round, enters CURRENT[i] and
//     triggers one step  x <- x - gamma (1/n) sum_i CURRENT[i]. Arrivals from workers that
//     already triggered go to NEXT[i] (buffered, never dropped).
//   After the n-th update: CURRENT <- NEXT, NEXT <- empty.
//   Every gradient used is at most 2n - 2 versions old (tested), no worker idles, nothing is
//   discarded. Theory: gamma = min{1/(8nL), eps B/(10 L sigma^2)}; tuned on Fashion-MNIST
//   (n = 100, Dirichlet 0.1): gamma = 0.05 (IA^2SGD 0.05, Malenia 2.0).
//
// IA^2SGD's warm-up (ia2sgd_config::warm_up, default on): the authors' code takes no step until
// every worker has a gradient in the table; stepping from the first arrival with the empty
// entries as zero (warm_up = false) was this library's first rule.
//
// Memory: n x d per table (Ringleader: two). The sum of the table's entries is kept and
// updated incrementally, so a step costs O(d), not O(n d).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <utility>
#include <vector>

#include "heterograd/algorithms/async/server.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::async {

namespace detail {

/// n running means of d-vectors, their counts, the oldest version in each, and their sum.
template <class T>
class mean_table {
 public:
  mean_table() = default;
  mean_table(std::size_t n, std::size_t d)
      : d_(d), means_(n * d, T(0)), sum_(d, T(0)), counts_(n, 0),
        oldest_(n, std::numeric_limits<std::uint64_t>::max()) {}

  std::size_t filled() const { return filled_; }
  std::size_t count(std::size_t i) const { return counts_[i]; }
  span<const T> sum() const { return span<const T>(sum_.data(), sum_.size()); }
  span<const T> entry(std::size_t i) const { return span<const T>(means_.data() + i * d_, d_); }
  /// Oldest version among the gradients in entry i (max() when empty).
  std::uint64_t oldest(std::size_t i) const { return oldest_[i]; }
  std::uint64_t oldest() const {
    std::uint64_t o = std::numeric_limits<std::uint64_t>::max();
    for (std::size_t i = 0; i < counts_.size(); ++i)
      if (counts_[i] > 0) o = std::min(o, oldest_[i]);
    return o;
  }

  /// Averages g (computed at `version`) into entry i.
  void add(std::size_t i, span<const T> g, std::uint64_t version) {
    span<T> m(means_.data() + i * d_, d_);
    if (counts_[i]++ == 0) ++filled_;
    ops::running_mean_add(g, m, span<T>(sum_.data(), d_), counts_[i]);
    oldest_[i] = std::min(oldest_[i], version);
  }
  /// Replaces entry i by g (IA^2SGD).
  void replace(std::size_t i, span<const T> g, std::uint64_t version) {
    span<T> m(means_.data() + i * d_, d_);
    if (counts_[i] == 0) ++filled_;
    counts_[i] = 1;
    ops::replace_entry(g, m, span<T>(sum_.data(), d_));
    oldest_[i] = version;
  }
  /// Empties every entry (the sum is exactly 0 again).
  void clear() {
    std::fill(means_.begin(), means_.end(), T(0));
    std::fill(sum_.begin(), sum_.end(), T(0));
    std::fill(counts_.begin(), counts_.end(), std::size_t{0});
    std::fill(oldest_.begin(), oldest_.end(), std::numeric_limits<std::uint64_t>::max());
    filled_ = 0;
  }
  /// Harmonic mean of the counts, ((1/n) sum 1/b_i)^{-1} (0 if an entry is empty).
  double harmonic_count() const {
    double s = 0;
    for (std::size_t c : counts_) {
      if (c == 0) return 0.0;
      s += 1.0 / static_cast<double>(c);
    }
    return static_cast<double>(counts_.size()) / s;
  }

  friend bool operator==(const mean_table&, const mean_table&) = default;

  /// Checkpointing: every member (the size d included), in a fixed order.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(d_, means_, sum_, counts_, oldest_, filled_);
  }
  friend void swap(mean_table& a, mean_table& b) noexcept {
    using std::swap;
    swap(a.d_, b.d_);
    swap(a.means_, b.means_);
    swap(a.sum_, b.sum_);
    swap(a.counts_, b.counts_);
    swap(a.oldest_, b.oldest_);
    swap(a.filled_, b.filled_);
  }

 private:
  std::size_t d_ = 0;
  std::vector<T> means_;
  std::vector<T> sum_;
  std::vector<std::size_t> counts_;
  std::vector<std::uint64_t> oldest_;
  std::size_t filled_ = 0;
};

}  // namespace detail

struct ia2sgd_config {
  /// The authors' rule: no step until every worker's entry holds a gradient (the arrivals
  /// before are stored and counted as buffered); false: a step from the first arrival, the
  /// empty entries counting as zero.
  bool warm_up = true;

  static constexpr auto description() {
    return describe("ia2sgd_config",
                    describe_field("warm_up", &ia2sgd_config::warm_up,
                                   "no step until every worker has a gradient in the table (the "
                                   "authors' rule); false: step from the first arrival, empty entries as zero"));
  }
  void validate() const { validate_fields(*this); }
};

/// IA^2SGD: one step per arrival with the mean of every worker's latest gradient (after the
/// warm-up, by default: once every worker has reported).
template <class T = double, class Optimizer = default_optimizer>
class ia2sgd : public detail::policy_base<T, Optimizer> {
  using base = detail::policy_base<T, Optimizer>;

 public:
  ia2sgd(std::size_t workers, model_server<T, Optimizer> server, ia2sgd_config config = {})
      : base(workers, std::move(server)), config_((config.validate(), config)), table_(workers, this->dim()) {}

  const ia2sgd_config& config() const { return config_; }
  const detail::mean_table<T>& table() const { return table_; }

  template <class Ctl, class Arrival, class G>
  void on_arrival(Ctl& ctl, const Arrival& a, const G& g) {
    const auto in = this->admit(ctl, a, g, "ia2sgd");
    if (!in) return;
    const std::uint64_t delay = in->delay;
    table_.replace(a.worker, in->gradient, a.version);
    if (config_.warm_up && table_.filled() < this->workers_) {
      ctl.buffered(a.worker, delay);  // in the table; the first step waits for every worker
      return;
    }
    this->server_.apply(table_.sum(), 1.0 / static_cast<double>(this->workers_));
    ctl.applied(a.worker, delay);
  }

  friend bool operator==(const ia2sgd& a, const ia2sgd& b) {
    return a.server_ == b.server_ && a.table_ == b.table_;
  }

  /// Checkpointing (core/archive.hpp): the mutable state; the configuration is rebuilt.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(this->server_, table_);
  }

 private:
  ia2sgd_config config_;
  detail::mean_table<T> table_;
};
template <class T, class O>
ia2sgd(std::size_t, model_server<T, O>) -> ia2sgd<T, O>;
template <class T, class O>
ia2sgd(std::size_t, model_server<T, O>, ia2sgd_config) -> ia2sgd<T, O>;

struct malenia_config {
  double threshold = 1.0;  ///< S: step once the harmonic mean of the counts reaches S (~sigma^2/eps)
  bool stop_stale = true;  ///< stop computations at the old x at each step

  static constexpr auto description() {
    return describe("malenia_config",
                    describe_field("threshold", &malenia_config::threshold,
                                   "S: step once the harmonic mean of the counts reaches S",
                                   finite_above(0)),
                    describe_field("stop_stale", &malenia_config::stop_stale,
                                   "stop computations at the old x at each step"));
  }
  void validate() const { validate_fields(*this); }
};

/// Malenia SGD: rounds at a fixed point; one step per round with the table average.
template <class T = double, class Optimizer = default_optimizer>
class malenia_sgd : public detail::policy_base<T, Optimizer> {
  using base = detail::policy_base<T, Optimizer>;

 public:
  malenia_sgd(std::size_t workers, model_server<T, Optimizer> server, malenia_config config = {})
      : base(workers, std::move(server)), config_((config.validate(), config)),
        table_(workers, this->dim()) {}

  const malenia_config& config() const { return config_; }
  const detail::mean_table<T>& table() const { return table_; }

  template <class Ctl, class Arrival, class G>
  void on_arrival(Ctl& ctl, const Arrival& a, const G& g) {
    const auto in = this->admit(ctl, a, g, "malenia_sgd");
    if (!in) return;
    const std::uint64_t delay = in->delay;
    if (delay > 0) {  // computed at an earlier round's point
      ctl.discarded(a.worker, delay);
      return;
    }
    table_.add(a.worker, in->gradient, a.version);
    if (table_.filled() < this->workers_ || table_.harmonic_count() < config_.threshold) {
      ctl.buffered(a.worker, 0);
      return;
    }
    this->server_.apply(table_.sum(), 1.0 / static_cast<double>(this->workers_));
    table_.clear();
    ctl.applied(a.worker, 0);
    if (config_.stop_stale) detail::stop_all_busy(ctl, this->workers_);
  }

  friend bool operator==(const malenia_sgd& a, const malenia_sgd& b) {
    return a.server_ == b.server_ && a.table_ == b.table_;
  }

  /// Checkpointing (core/archive.hpp): the mutable state; the configuration is rebuilt.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(this->server_, table_);
  }

 private:
  malenia_config config_;
  detail::mean_table<T> table_;
};
template <class T, class O>
malenia_sgd(std::size_t, model_server<T, O>) -> malenia_sgd<T, O>;
template <class T, class O>
malenia_sgd(std::size_t, model_server<T, O>, malenia_config) -> malenia_sgd<T, O>;

/// Ringleader ASGD: gather, then n updates per round, one per worker; late arrivals wait in
/// NEXT for the next round.
template <class T = double, class Optimizer = default_optimizer>
class ringleader_asgd : public detail::policy_base<T, Optimizer> {
  using base = detail::policy_base<T, Optimizer>;

 public:
  ringleader_asgd(std::size_t workers, model_server<T, Optimizer> server)
      : base(workers, std::move(server)), current_(workers, this->dim()),
        next_(workers, this->dim()), triggered_(workers, false) {}

  /// Completed rounds.
  std::uint64_t round() const { return round_; }
  /// Updates of the current round so far (0 while gathering).
  std::size_t updates_in_round() const { return updates_; }
  /// Largest age k - v of any gradient used in any step so far (theory: <= 2n - 2).
  std::uint64_t max_delay_used() const { return max_used_; }
  const detail::mean_table<T>& current() const { return current_; }
  const detail::mean_table<T>& next() const { return next_; }

  template <class Ctl, class Arrival, class G>
  void on_arrival(Ctl& ctl, const Arrival& a, const G& g) {
    const auto in = this->admit(ctl, a, g, "ringleader_asgd");
    if (!in) return;
    const std::uint64_t delay = in->delay;
    const auto gv = in->gradient;
    if (triggered_[a.worker]) {  // already stepped this round: keep for the next
      next_.add(a.worker, gv, a.version);
      ctl.buffered(a.worker, delay);
      return;
    }
    current_.add(a.worker, gv, a.version);
    if (current_.filled() < this->workers_) {  // phase 1: gathering
      ctl.buffered(a.worker, delay);
      return;
    }
    // Phase 2: this worker's one update of the round.
    const std::uint64_t k = this->version();
    max_used_ = std::max(max_used_, k - current_.oldest());
    this->server_.apply(current_.sum(), 1.0 / static_cast<double>(this->workers_));
    ctl.applied(a.worker, delay);
    triggered_[a.worker] = true;
    if (++updates_ < this->workers_) return;
    // End of round: CURRENT <- NEXT, NEXT <- empty.
    swap(current_, next_);
    next_.clear();
    std::fill(triggered_.begin(), triggered_.end(), false);
    updates_ = 0;
    ++round_;
  }

  friend bool operator==(const ringleader_asgd& a, const ringleader_asgd& b) {
    return a.server_ == b.server_ && a.current_ == b.current_ && a.next_ == b.next_ &&
           a.triggered_ == b.triggered_ && a.updates_ == b.updates_ && a.round_ == b.round_;
  }

  /// Checkpointing (core/archive.hpp): the mutable state; the configuration is rebuilt.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(this->server_, current_, next_, triggered_, updates_, round_, max_used_);
  }

 private:
  detail::mean_table<T> current_;
  detail::mean_table<T> next_;
  std::vector<bool> triggered_;
  std::size_t updates_ = 0;
  std::uint64_t round_ = 0;
  std::uint64_t max_used_ = 0;
};
template <class T, class O>
ringleader_asgd(std::size_t, model_server<T, O>) -> ringleader_asgd<T, O>;

}  // namespace heterograd::algorithms::async
