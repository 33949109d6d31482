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
//   waits until every G[i] holds a gradient, and is taken by the arrival after the one that
//   fills the table (warm_up; see below).
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
// IA^2SGD's warm-up (ia2sgd_config::warm_up, default on): the authors' simulator takes no step
// until every worker has a gradient in the table, and the arrival that completes the table is
// stored without a step too: their first step comes from the arrival after it (its warm-up loop
// ends on the completing arrival, computes the mean and falls through to the steady state,
// which pops the next arrival). So with the default, the updates after A arrivals are A - c,
// c being the index of the completing arrival. step_on_completion = true also steps on the
// completing arrival (A - c + 1; this library's rule before issue 50); warm_up = false steps
// from the first arrival with the empty entries as zero (A; the library's first rule).
//
// Memory: n x d per table (Ringleader: two). The sum of the table's entries is kept and
// updated incrementally, so a step costs O(d), not O(n d).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/algorithms/async/server.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::algorithms::async {

namespace detail {

/// n running means of d-vectors, their counts, the oldest version in each, and their sum;
/// the means and the sum live in memory M (the server's), the counts on the host.
template <class T, class M = host_memory>
class mean_table {
 public:
  using vector_type = typename M::template vector<T>;
  using memory_space = typename M::memory_space;

  mean_table(const M& memory, std::size_t n, std::size_t d)
      : memory_(memory), d_(d), means_(memory_.template make<T>(n * d)),
        sum_(memory_.template make<T>(d)), counts_(n, 0),
        oldest_(n, std::numeric_limits<std::uint64_t>::max()) {}

  std::size_t filled() const { return filled_; }
  std::size_t count(std::size_t i) const { return counts_[i]; }
  span<const T, memory_space> sum() const { return kernels::cview(memory_, sum_); }
  span<const T, memory_space> entry(std::size_t i) const {
    return kernels::cview(memory_, means_).subspan(i * d_, d_);
  }
  /// Oldest version among the gradients in entry i (max() when empty).
  std::uint64_t oldest(std::size_t i) const { return oldest_[i]; }
  std::uint64_t oldest() const {
    std::uint64_t o = std::numeric_limits<std::uint64_t>::max();
    for (std::size_t i = 0; i < counts_.size(); ++i)
      if (counts_[i] > 0) o = std::min(o, oldest_[i]);
    return o;
  }

  /// Averages g (computed at `version`) into entry i.
  void add(std::size_t i, span<const T, memory_space> g, std::uint64_t version) {
    if (counts_[i]++ == 0) ++filled_;
    ops::running_mean_add(memory_, g, entry_of(i), kernels::view(memory_, sum_), counts_[i]);
    oldest_[i] = std::min(oldest_[i], version);
  }
  /// Replaces entry i by g (IA^2SGD).
  void replace(std::size_t i, span<const T, memory_space> g, std::uint64_t version) {
    if (counts_[i] == 0) ++filled_;
    counts_[i] = 1;
    ops::replace_entry(memory_, g, entry_of(i), kernels::view(memory_, sum_));
    oldest_[i] = version;
  }
  /// Empties entry i and takes it out of the sum (a worker that left: docs/elastic.md).
  /// Bytes: 4 sizeof(T) per element (read the entry and the sum, write both).
  void remove(std::size_t i) {
    if (counts_[i] == 0) return;
    const auto e = entry_of(i);
    ops::axpy(memory_, T(-1), span<const T, memory_space>(e), kernels::view(memory_, sum_));
    ops::zero(memory_, e);
    counts_[i] = 0;
    oldest_[i] = std::numeric_limits<std::uint64_t>::max();
    --filled_;
  }
  /// Empties every entry (the sum is exactly 0 again).
  void clear() {
    ops::zero(memory_, kernels::view(memory_, means_));
    ops::zero(memory_, kernels::view(memory_, sum_));
    std::fill(counts_.begin(), counts_.end(), std::size_t{0});
    std::fill(oldest_.begin(), oldest_.end(), std::numeric_limits<std::uint64_t>::max());
    filled_ = 0;
  }
  /// Harmonic mean of the counts, ((1/n) sum 1/b_i)^{-1} (0 if an entry is empty), over
  /// the entries not flagged in `absent` (empty: every entry; n: those counted).
  double harmonic_count(std::span<const char> absent = {}) const {
    double s = 0;
    std::size_t n = 0;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      if (!absent.empty() && absent[i]) continue;
      if (counts_[i] == 0) return 0.0;
      s += 1.0 / static_cast<double>(counts_[i]);
      ++n;
    }
    return static_cast<double>(n) / s;
  }

  /// Bitwise equality of the entries and the sum, equality of the counts and versions.
  friend bool operator==(const mean_table& a, const mean_table& b) {
    return a.d_ == b.d_ && a.counts_ == b.counts_ && a.oldest_ == b.oldest_ &&
           a.filled_ == b.filled_ && kernels::same_bits(a.memory_, a.means_, b.means_) &&
           kernels::same_bits(a.memory_, a.sum_, b.sum_);
  }

  /// Checkpointing: every member (the size d included), in a fixed order; the means and the
  /// sum as host vectors of the table's shape (another shape is refused by name).
  template <class Archive>
  void serialize(Archive& ar) {
    const std::size_t d = d_;
    ar(d_);
    if constexpr (!Archive::saving) require(d_ == d, "table.dim", d_, "must be the model's dimension (" + std::to_string(d) + ")");
    kernels::archive_buffer(ar, memory_, means_, "table.means", means_.size());
    kernels::archive_buffer(ar, memory_, sum_, "table.sum", sum_.size());
    ar(counts_, oldest_, filled_);
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
  span<T, memory_space> entry_of(std::size_t i) {
    return kernels::view(memory_, means_).subspan(i * d_, d_);
  }

  M memory_;
  std::size_t d_ = 0;
  vector_type means_;
  vector_type sum_;
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
  /// With warm_up: the arrival that completes the table steps too (one update more than the
  /// authors' code); false (their rule): it is stored, and the next arrival takes the first
  /// step. Without warm_up every arrival steps and this has no effect.
  bool step_on_completion = false;

  static constexpr auto description() {
    return describe("ia2sgd_config",
                    describe_field("warm_up", &ia2sgd_config::warm_up,
                                   "no step until every worker has a gradient in the table (the "
                                   "authors' rule); false: step from the first arrival, empty entries as zero"),
                    describe_field("step_on_completion", &ia2sgd_config::step_on_completion,
                                   "with warm_up, the arrival that completes the table steps too (one "
                                   "update more than the authors' code, where the next arrival takes the first step)"));
  }
  void validate() const { validate_fields(*this); }
};

/// IA^2SGD: one step per arrival with the mean of every worker's latest gradient (after the
/// warm-up, by default: from the first arrival after every worker has reported).
template <class T = double, class Optimizer = default_optimizer, class Memory = host_memory>
class ia2sgd : public detail::policy_base<T, Optimizer, Memory> {
  using base = detail::policy_base<T, Optimizer, Memory>;

 public:
  ia2sgd(std::size_t workers, model_server<T, Optimizer, Memory> server, ia2sgd_config config = {})
      : base(workers, std::move(server)), config_((config.validate(), config)), table_(this->server_.memory(), workers, this->dim()) {}

  const ia2sgd_config& config() const { return config_; }
  const detail::mean_table<T, Memory>& table() const { return table_; }

  template <class Ctl, class Arrival, class G>
  void on_arrival(Ctl& ctl, const Arrival& a, const G& g) {
    const auto in = this->admit(ctl, a, g, "ia2sgd");
    if (!in) return;
    const std::uint64_t delay = in->delay;
    const bool was_full = table_.filled() >= this->live_;
    table_.replace(a.worker, in->gradient, a.version);
    const bool full = table_.filled() >= this->live_;
    if (config_.warm_up && !was_full && !(full && config_.step_on_completion)) {
      // In the table; the first step waits for every member, and (the authors' rule) for the
      // arrival after the one that completes the table.
      ctl.buffered(a.worker, delay);
      return;
    }
    this->server_.apply(table_.sum(), 1.0 / static_cast<double>(this->live_));
    ctl.applied(a.worker, delay);
  }

  /// Membership (docs/elastic.md; the paper's f = (1/n) sum_i f_i has a fixed n): a leaver's
  /// entry leaves the table and the sum, and the step averages over the n_live members, so
  /// no step uses the gradient of a worker that left; the objective becomes the members'
  /// mean. A joiner's entry is empty: the warm-up rule applies to the new member set (no
  /// step until it has reported; with warm_up = false its entry counts as zero).
  template <class Ctl>
  void on_leave(Ctl&, worker_id w) {
    this->mark_leave(w);
    table_.remove(w);
  }
  friend bool operator==(const ia2sgd& a, const ia2sgd& b) {
    return a.server_ == b.server_ && a.same_membership(b) && a.table_ == b.table_;
  }

  /// Checkpointing (core/archive.hpp): the mutable state; the configuration is rebuilt.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(this->server_, table_);
    this->serialize_membership(ar);
  }

 private:
  ia2sgd_config config_;
  detail::mean_table<T, Memory> table_;
};
template <class T, class O, class M>
ia2sgd(std::size_t, model_server<T, O, M>) -> ia2sgd<T, O, M>;
template <class T, class O, class M>
ia2sgd(std::size_t, model_server<T, O, M>, ia2sgd_config) -> ia2sgd<T, O, M>;

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
template <class T = double, class Optimizer = default_optimizer, class Memory = host_memory>
class malenia_sgd : public detail::policy_base<T, Optimizer, Memory> {
  using base = detail::policy_base<T, Optimizer, Memory>;

 public:
  malenia_sgd(std::size_t workers, model_server<T, Optimizer, Memory> server, malenia_config config = {})
      : base(workers, std::move(server)), config_((config.validate(), config)),
        table_(this->server_.memory(), workers, this->dim()) {}

  const malenia_config& config() const { return config_; }
  const detail::mean_table<T, Memory>& table() const { return table_; }

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
    if (table_.filled() < this->live_ || table_.harmonic_count(this->absent_) < config_.threshold) {
      ctl.buffered(a.worker, 0);
      return;
    }
    this->server_.apply(table_.sum(), 1.0 / static_cast<double>(this->live_));
    table_.clear();
    ctl.applied(a.worker, 0);
    if (config_.stop_stale) detail::stop_all_busy(ctl, this->workers_);
  }

  /// Membership (the paper is silent; docs/elastic.md): a leaver's running mean leaves the
  /// table; the round's condition (every member has >= 1 gradient, harmonic mean of the
  /// members' counts >= S) and the step's 1/n are over the members. A joiner's count is 0:
  /// the round waits for its first gradient at the round's point.
  template <class Ctl>
  void on_leave(Ctl&, worker_id w) {
    this->mark_leave(w);
    table_.remove(w);
  }
  friend bool operator==(const malenia_sgd& a, const malenia_sgd& b) {
    return a.server_ == b.server_ && a.same_membership(b) && a.table_ == b.table_;
  }

  /// Checkpointing (core/archive.hpp): the mutable state; the configuration is rebuilt.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(this->server_, table_);
    this->serialize_membership(ar);
  }

 private:
  malenia_config config_;
  detail::mean_table<T, Memory> table_;
};
template <class T, class O, class M>
malenia_sgd(std::size_t, model_server<T, O, M>) -> malenia_sgd<T, O, M>;
template <class T, class O, class M>
malenia_sgd(std::size_t, model_server<T, O, M>, malenia_config) -> malenia_sgd<T, O, M>;

/// Ringleader ASGD: gather, then n updates per round, one per worker; late arrivals wait in
/// NEXT for the next round.
template <class T = double, class Optimizer = default_optimizer, class Memory = host_memory>
class ringleader_asgd : public detail::policy_base<T, Optimizer, Memory> {
  using base = detail::policy_base<T, Optimizer, Memory>;

 public:
  ringleader_asgd(std::size_t workers, model_server<T, Optimizer, Memory> server)
      : base(workers, std::move(server)), current_(this->server_.memory(), workers, this->dim()),
        next_(this->server_.memory(), workers, this->dim()), triggered_(workers, false) {}

  /// Completed rounds.
  std::uint64_t round() const { return round_; }
  /// Updates of the current round so far (0 while gathering).
  std::size_t updates_in_round() const { return updates_; }
  /// Largest age k - v of any gradient used in any step so far (theory: <= 2n - 2).
  std::uint64_t max_delay_used() const { return max_used_; }
  const detail::mean_table<T, Memory>& current() const { return current_; }
  const detail::mean_table<T, Memory>& next() const { return next_; }

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
    if (current_.filled() < this->live_) {  // phase 1: gathering (or waiting for a joiner)
      ctl.buffered(a.worker, delay);
      return;
    }
    // Phase 2: this worker's one update of the round.
    const std::uint64_t k = this->version();
    max_used_ = std::max(max_used_, k - current_.oldest());
    this->server_.apply(current_.sum(), 1.0 / static_cast<double>(this->live_));
    ctl.applied(a.worker, delay);
    triggered_[a.worker] = true;
    ++updates_;
    end_round_when_done();
  }
  /// Membership (the paper is silent; docs/elastic.md): a leaver's entries leave CURRENT and
  /// NEXT; its update this round, if it made one, no longer counts, and the round ends once
  /// every remaining member has triggered (at once, if they all have). A joiner's entries
  /// are empty: the table is complete again, and steps resume, when it has reported.
  template <class Ctl>
  void on_leave(Ctl&, worker_id w) {
    this->mark_leave(w);
    current_.remove(w);
    next_.remove(w);
    if (triggered_[w]) {
      triggered_[w] = false;
      --updates_;
    }
    end_round_when_done();
  }

  friend bool operator==(const ringleader_asgd& a, const ringleader_asgd& b) {
    return a.server_ == b.server_ && a.same_membership(b) && a.current_ == b.current_ && a.next_ == b.next_ &&
           a.triggered_ == b.triggered_ && a.updates_ == b.updates_ && a.round_ == b.round_;
  }

  /// Checkpointing (core/archive.hpp): the mutable state; the configuration is rebuilt.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(this->server_, current_, next_, triggered_, updates_, round_, max_used_);
    this->serialize_membership(ar);
  }

 private:
  // End of round after one update per member: CURRENT <- NEXT, NEXT <- empty.
  void end_round_when_done() {
    if (updates_ == 0 || updates_ < this->live_) return;
    swap(current_, next_);
    next_.clear();
    std::fill(triggered_.begin(), triggered_.end(), false);
    updates_ = 0;
    ++round_;
  }
  detail::mean_table<T, Memory> current_;
  detail::mean_table<T, Memory> next_;
  std::vector<bool> triggered_;
  std::size_t updates_ = 0;
  std::uint64_t round_ = 0;
  std::uint64_t max_used_ = 0;
};
template <class T, class O, class M>
ringleader_asgd(std::size_t, model_server<T, O, M>) -> ringleader_asgd<T, O, M>;

}  // namespace heterograd::algorithms::async
