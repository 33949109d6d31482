#pragma once
// DAPPLE's planner (Fan et al., "DAPPLE: A Pipelined Data Parallel Approach for Training Large
// Models", PPoPP 2021, #3 in docs/references.md): for workers of different speeds and memory
// budgets, choose the stages (contiguous layer ranges), the workers of each stage (a contiguous
// group in a worker order; more than one worker = the stage is replicated, DAPPLE's hybrid data
// parallelism) and the micro-batch count M, minimising the predicted step time
//
//   J = (M − 1)·K + Σ_s τ_s + Σ_c x_c + max(0, max_s (AR_s − s·K)),   K = max(max_s τ_s, max_c x_c)
//
// τ_s: stage s's time per micro-batch, t_s / M, with t_s = max_{w∈G_s} n_w·a_w, a_w = rows ·
//      Σ_{l∈s} (f_wl + b_wl) (worker w's profiled per-sample times) and n_w the micro-batches w
//      runs (the least-makespan integer split of M: micro-batch by micro-batch to the worker
//      that would finish it first, ties to the lower worker id);
// x_c: the transfer at cut c, per micro-batch: 2·(latency + output_bytes·rows / bandwidth)
//      (activations forward, their gradients back, over one shared link per cut);
// AR_s: ring all-reduce of a replicated stage's gradients over its r workers,
//      2(r − 1)·latency + 2(r − 1)/r · bytes / bandwidth, hidden behind the s·K the stages
//      before it still need to drain (stage 0 drains last, so its all-reduce is fully exposed).
// (M − 1)·K + Σ τ + Σ x is the steady state plus one micro-batch's pass through every stage
// and link; transfers are pipelined like stages, so a link slower than every stage sets K.
// Memory, per worker w of stage s (0-based) of S: state_bytes_per_parameter·P_s +
// act_s·rows·k_w (+ bytes_per_parameter·P_s·k_w when stashing weights) <= w's budget, with
// in-flight micro-batches k_w = min(S − s, n_w) under 1F1B and n_w under GPipe.
//
// Exactness. J's max terms do not decompose over stages, so for every candidate cap C (each
// value a stage or link time can take) and stage count S a dynamic program over (stages done,
// layers done, worker state) keeps a Pareto front of (Σ τ + Σ x, largest exposed all-reduce)
// and accepts only plans whose largest stage or link time is exactly C; the best (M, S, C)
// wins. Every plan of the model is counted by exactly the pass of its own K, so the result is
// the optimum (plan_pipeline_exhaustive checks it by enumeration). Passes run in increasing C
// and stop once M·C reaches the best J found (J >= M·K). The worker state is a position in the
// order (groups are runs of the order, G = O(W²) groups, W + 1 states) or, for order = all, the
// set of workers used so far (groups are any sets: G = 2^W, 2^W states, 3^W moves).
// Complexity per M: caps O(L²·G) × Σ_S O(S·L²·moves) × front size; measured times are in
// docs/balance.md.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "heterograd/balance/pipeline_schedule.hpp"
#include "heterograd/core/describe.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::balance {

/// Which groups of workers a stage may run on.
enum class worker_order {
  given,     ///< runs of the workers as listed
  by_speed,  ///< runs of the workers fastest first (least Σ_l f + b), ties by index
  all        ///< any set of workers (W <= max_workers_every_order)
};
inline constexpr choice<worker_order> worker_orders[] = {{"given", worker_order::given},
                                                         {"by_speed", worker_order::by_speed},
                                                         {"all", worker_order::all}};

inline constexpr std::size_t max_workers_every_order = 6;
/// The largest micro-batch count a plan may use.
inline constexpr std::size_t max_micro_batches = 1024;

/// What a layer needs, whichever worker runs it.
struct layer_profile {
  double parameters = 0;                   ///< parameter count
  double activation_bytes_per_sample = 0;  ///< kept from the forward until the backward
  double output_bytes_per_sample = 0;      ///< sent to the next stage when the layer ends one
};

/// One worker: its profiled per-layer times (seconds per sample: a micro-batch of r rows takes
/// r times as long) and its memory budget.
struct worker_profile {
  std::vector<double> forward_s_per_sample;
  std::vector<double> backward_s_per_sample;
  double memory_bytes = std::numeric_limits<double>::infinity();
};

/// The network between any two workers.
struct link_profile {
  double latency_s = 0;
  double bytes_per_s = std::numeric_limits<double>::infinity();
};

struct pipeline_plan_config {
  std::size_t global_batch = 0;            ///< B, rows per step
  std::vector<std::size_t> micro_batches;  ///< candidate M ({}: every divisor of B up to 32)
  pipeline_schedule_kind schedule = pipeline_schedule_kind::one_f_one_b;
  bool replication = true;                ///< a stage may run on a group of workers
  double state_bytes_per_parameter = 12;  ///< weights + gradients + optimizer slots (fp32 momentum)
  double bytes_per_parameter = 4;         ///< one copy: all-reduced gradients, a stashed weight
  bool stash_weights = false;             ///< asynchronous pipelines: a weight copy per in-flight
  worker_order order = worker_order::by_speed;

  static constexpr auto description() {
    using c = pipeline_plan_config;
    return describe(
        "pipeline_plan",
        describe_field("global_batch", &c::global_batch, "B, rows per step", at_least(1)),
        describe_field(
            "micro_batches", &c::micro_batches,
            "candidate micro-batch counts M, each dividing B (empty: every divisor up to 32)",
            at_least(1)),
        describe_field("schedule", &c::schedule,
                       "the schedule, which sets the micro-batches a worker holds in flight",
                       pipeline_schedule_kinds),
        describe_field("replication", &c::replication, "a stage may run on a group of workers"),
        describe_field("state_bytes_per_parameter", &c::state_bytes_per_parameter,
                       "bytes a worker holds per parameter of its stage", finite_at_least(0)),
        describe_field("bytes_per_parameter", &c::bytes_per_parameter,
                       "bytes of one gradient or weight copy per parameter", finite_at_least(0)),
        describe_field("stash_weights", &c::stash_weights,
                       "a weight copy per in-flight micro-batch"),
        describe_field(
            "order", &c::order,
            "groups a stage may run on: runs of the given order, runs fastest first, or any set",
            worker_orders));
  }
  void validate() const {
    validate_fields(*this);
    for (std::size_t i = 0; i < micro_batches.size(); ++i) {
      const std::string name = "pipeline_plan.micro_batches[" + std::to_string(i) + "]";
      require(micro_batches[i] <= global_batch && global_batch % micro_batches[i] == 0, name,
              micro_batches[i], "must divide global_batch (" + std::to_string(global_batch) + ")");
      // The planner splits a stage's micro-batches one by one, for every group it tabulates.
      require(micro_batches[i] <= max_micro_batches, name, micro_batches[i],
              "must be <= " + std::to_string(max_micro_batches));
    }
  }
};

/// One stage: layers [first_layer, end_layer) on `workers`, worker workers[i] running
/// micro_batches[i] of the step's M and holding memory_bytes[i].
struct stage_plan {
  std::size_t first_layer = 0, end_layer = 0;
  std::vector<std::size_t> workers;
  std::vector<std::size_t> micro_batches;
  std::vector<double> memory_bytes;
  double seconds_per_micro_batch = 0;  ///< τ_s
  double allreduce_s = 0;              ///< AR_s (0 unless replicated)
};

struct pipeline_plan {
  std::vector<stage_plan> stages;
  std::size_t micro_batches = 0;     ///< M
  std::size_t micro_batch_rows = 0;  ///< B / M
  double predicted_step_s = 0;       ///< J
  double bubble_fraction = 0;        ///< 1 − M·Σ_s τ_s / (S·J): idle share of the stages
};

namespace detail {

struct planner_input {
  std::span<const layer_profile> layers;
  std::span<const worker_profile> workers;
  link_profile link;
  const pipeline_plan_config& config;
};

inline void require_finite_non_negative(const std::string& name, double v) {
  require(std::isfinite(v) && v >= 0, name, v, "must be finite and >= 0");
}

inline void validate_planner_input(const planner_input& in) {
  in.config.validate();
  require(!in.layers.empty(), "layers", in.layers.size(), "must hold at least one layer");
  require(!in.workers.empty(), "workers", in.workers.size(), "must hold at least one worker");
  for (std::size_t l = 0; l < in.layers.size(); ++l) {
    const std::string p = "layers[" + std::to_string(l) + "].";
    require_finite_non_negative(p + "parameters", in.layers[l].parameters);
    require_finite_non_negative(p + "activation_bytes_per_sample",
                                in.layers[l].activation_bytes_per_sample);
    require_finite_non_negative(p + "output_bytes_per_sample",
                                in.layers[l].output_bytes_per_sample);
  }
  for (std::size_t w = 0; w < in.workers.size(); ++w) {
    const auto& x = in.workers[w];
    const std::string p = "workers[" + std::to_string(w) + "].";
    require_same_size(p + "forward_s_per_sample", x.forward_s_per_sample.size(), "layers",
                      in.layers.size());
    require_same_size(p + "backward_s_per_sample", x.backward_s_per_sample.size(), "layers",
                      in.layers.size());
    for (std::size_t l = 0; l < in.layers.size(); ++l) {
      require_finite_non_negative(p + "forward_s_per_sample[" + std::to_string(l) + "]",
                                  x.forward_s_per_sample[l]);
      require_finite_non_negative(p + "backward_s_per_sample[" + std::to_string(l) + "]",
                                  x.backward_s_per_sample[l]);
    }
    require(x.memory_bytes > 0, p + "memory_bytes", x.memory_bytes,
            "must be > 0 (infinity: no budget)");
  }
  require_finite_non_negative("link.latency_s", in.link.latency_s);
  require(in.link.bytes_per_s > 0, "link.bytes_per_s", in.link.bytes_per_s,
          "must be > 0 (infinity: free)");
}

/// The candidate micro-batch counts: the config's, or every divisor of B up to 32.
inline std::vector<std::size_t> candidate_micro_batches(const pipeline_plan_config& c) {
  if (!c.micro_batches.empty()) return c.micro_batches;
  std::vector<std::size_t> m;
  for (std::size_t d = 1; d <= std::min<std::size_t>(32, c.global_batch); ++d)
    if (c.global_batch % d == 0) m.push_back(d);
  return m;
}

/// Worker w's seconds for one micro-batch through layers [i, j).
inline double micro_batch_seconds(const planner_input& in, std::size_t w, std::size_t i,
                                  std::size_t j, std::size_t rows) {
  double s = 0;
  for (std::size_t l = i; l < j; ++l)
    s += in.workers[w].forward_s_per_sample[l] + in.workers[w].backward_s_per_sample[l];
  return s * static_cast<double>(rows);
}

/// The least-makespan split of M micro-batches over a group: each micro-batch goes to the worker
/// that would finish it first (optimal for identical jobs on uniform machines), ties to the
/// lower worker id, so the split does not depend on the order the group is listed in.
inline std::vector<std::size_t> split_micro_batches(std::span<const std::size_t> group,
                                                    std::span<const double> seconds,
                                                    std::size_t m) {
  std::vector<std::size_t> n(group.size(), 0);
  for (std::size_t k = 0; k < m; ++k) {
    std::size_t best = 0;
    for (std::size_t g = 1; g < group.size(); ++g) {
      const double a = static_cast<double>(n[g] + 1) * seconds[g];
      const double b = static_cast<double>(n[best] + 1) * seconds[best];
      if (a < b || (a == b && group[g] < group[best])) best = g;
    }
    ++n[best];
  }
  return n;
}

/// Per-micro-batch transfer at the cut before layer j (0 < j < L).
inline double cut_seconds(const planner_input& in, std::size_t j, std::size_t rows) {
  const double bytes = in.layers[j - 1].output_bytes_per_sample * static_cast<double>(rows);
  return 2 * (in.link.latency_s + bytes / in.link.bytes_per_s);
}

inline double allreduce_seconds(const planner_input& in, double parameters, std::size_t r) {
  if (r <= 1) return 0;
  const double rr = static_cast<double>(r), bytes = parameters * in.config.bytes_per_parameter;
  return 2 * (rr - 1) * in.link.latency_s + 2 * (rr - 1) / rr * bytes / in.link.bytes_per_s;
}

inline double stage_parameters(const planner_input& in, std::size_t i, std::size_t j) {
  double p = 0;
  for (std::size_t l = i; l < j; ++l) p += in.layers[l].parameters;
  return p;
}

/// Bytes a worker of a stage over layers [i, j) holds with `in_flight` micro-batches.
inline double worker_memory(const planner_input& in, std::size_t i, std::size_t j, std::size_t rows,
                            std::size_t in_flight) {
  double act = 0;
  for (std::size_t l = i; l < j; ++l) act += in.layers[l].activation_bytes_per_sample;
  const double p = stage_parameters(in, i, j), k = static_cast<double>(in_flight);
  double m = in.config.state_bytes_per_parameter * p + act * static_cast<double>(rows) * k;
  if (in.config.stash_weights) m += in.config.bytes_per_parameter * p * k;
  return m;
}

inline std::size_t in_flight_of(const pipeline_plan_config& c, std::size_t stages, std::size_t s,
                                std::size_t n) {
  return c.schedule == pipeline_schedule_kind::gpipe ? n : std::min(stages - s, n);
}

/// A stage's group: its split of the micro-batches, τ and all-reduce time.
struct group_cost {
  std::vector<std::size_t> micro_batches;
  double tau = 0, allreduce = 0;
};

inline group_cost evaluate_group(const planner_input& in, std::size_t i, std::size_t j,
                                 std::span<const std::size_t> group, std::size_t m) {
  const std::size_t rows = in.config.global_batch / m;
  std::vector<double> sec(group.size());
  for (std::size_t g = 0; g < group.size(); ++g)
    sec[g] = micro_batch_seconds(in, group[g], i, j, rows);
  group_cost c;
  c.micro_batches = split_micro_batches(group, sec, m);
  double t = 0;
  for (std::size_t g = 0; g < group.size(); ++g)
    t = std::max(t, static_cast<double>(c.micro_batches[g]) * sec[g]);
  c.tau = t / static_cast<double>(m);
  c.allreduce = allreduce_seconds(in, stage_parameters(in, i, j), group.size());
  return c;
}

/// Whether every worker of the group fits its budget as stage s of S.
inline bool group_fits(const planner_input& in, std::size_t i, std::size_t j,
                       std::span<const std::size_t> group, std::span<const std::size_t> n,
                       std::size_t rows, std::size_t stages, std::size_t s) {
  for (std::size_t g = 0; g < group.size(); ++g)
    if (worker_memory(in, i, j, rows, in_flight_of(in.config, stages, s, n[g])) >
        in.workers[group[g]].memory_bytes)
      return false;
  return true;
}

/// The plan with boundaries b (S + 1 entries) and groups (S), every derived field filled and J
/// computed; nullopt when a worker is over its budget.
inline std::optional<pipeline_plan> evaluate_plan(
    const planner_input& in, std::span<const std::size_t> b,
    const std::vector<std::vector<std::size_t>>& groups, std::size_t m) {
  const std::size_t stages = groups.size(), rows = in.config.global_batch / m;
  pipeline_plan p;
  p.micro_batches = m;
  p.micro_batch_rows = rows;
  double k = 0, sum = 0, busy = 0;
  bool fits = true;
  for (std::size_t s = 0; s < stages; ++s) {
    const auto c = evaluate_group(in, b[s], b[s + 1], groups[s], m);
    stage_plan st{b[s], b[s + 1], groups[s], c.micro_batches, {}, c.tau, c.allreduce};
    for (std::size_t g = 0; g < groups[s].size(); ++g) {
      st.memory_bytes.push_back(worker_memory(
          in, b[s], b[s + 1], rows, in_flight_of(in.config, stages, s, c.micro_batches[g])));
      fits = fits && st.memory_bytes.back() <= in.workers[groups[s][g]].memory_bytes;
    }
    k = std::max(k, c.tau);
    sum += c.tau;
    busy += c.tau;
    if (s > 0) {
      const double x = cut_seconds(in, b[s], rows);
      k = std::max(k, x);
      sum += x;
    }
    p.stages.push_back(std::move(st));
  }
  if (!fits) return std::nullopt;
  double exposed = 0;
  for (std::size_t s = 0; s < stages; ++s)
    exposed = std::max(exposed, p.stages[s].allreduce_s - static_cast<double>(s) * k);
  p.predicted_step_s = static_cast<double>(m - 1) * k + sum + exposed;
  p.bubble_fraction =
      p.predicted_step_s > 0
          ? 1 - static_cast<double>(m) * busy / (static_cast<double>(stages) * p.predicted_step_s)
          : 0;
  return p;
}

/// The worker order groups are taken from (order = all: the given one; the DP then takes
/// groups as sets).
inline std::vector<std::size_t> worker_order_of(const planner_input& in) {
  const std::size_t w = in.workers.size();
  std::vector<std::size_t> id(w);
  std::iota(id.begin(), id.end(), std::size_t{0});
  if (in.config.order != worker_order::by_speed) return id;
  std::vector<double> total(w);
  for (std::size_t i = 0; i < w; ++i) total[i] = micro_batch_seconds(in, i, 0, in.layers.size(), 1);
  std::stable_sort(id.begin(), id.end(),
                   [&](std::size_t a, std::size_t b) { return total[a] < total[b]; });
  return id;
}

/// One M: the groups a stage may run on, each group's cost for every layer range, and the
/// worker states the DP walks. For order = given / by_speed a state is a position in the order
/// (a group is a run of positions [a, b), a worker may idle between groups); for order = all a
/// state is the set of workers used so far (a group is any set of unused workers).
struct group_table {
  std::size_t layers = 0, m = 0, rows = 0;
  struct cell {
    double tau = 0, allreduce = 0;
    std::size_t fits_below = 0;  ///< fits as a stage with S − s <= this (0: never)
  };
  struct move {
    std::size_t group, to;
  };
  std::vector<std::vector<std::size_t>> groups;  ///< workers of each group
  std::vector<cell> cost;                        ///< [(i·(L+1) + j)·G + group]
  std::vector<double> cut;                       ///< cut[j]: transfer before layer j
  std::vector<std::vector<move>> moves;          ///< per state: a stage on a group, and where to
  std::vector<std::ptrdiff_t> idle;  ///< per state: the state past one idle worker, or -1
  std::vector<std::size_t> free;     ///< per state: workers not yet used or passed

  std::size_t at(std::size_t i, std::size_t j, std::size_t g) const {
    return (i * (layers + 1) + j) * groups.size() + g;
  }
};

/// The groups and states for the config's order.
inline void add_worker_states(const planner_input& in, group_table& t) {
  const std::size_t W = in.workers.size();
  const bool any_size = in.config.replication;
  if (in.config.order != worker_order::all) {
    const auto order = worker_order_of(in);
    t.moves.resize(W + 1);
    t.idle.assign(W + 1, -1);
    for (std::size_t a = 0; a <= W; ++a) t.free.push_back(W - a);
    for (std::size_t a = 0; a < W; ++a) {
      t.idle[a] = static_cast<std::ptrdiff_t>(a + 1);
      for (std::size_t b = a + 1; b <= (any_size ? W : a + 1); ++b) {
        t.moves[a].push_back({t.groups.size(), b});
        t.groups.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(a),
                              order.begin() + static_cast<std::ptrdiff_t>(b));
      }
    }
    return;
  }
  require(
      W <= max_workers_every_order, "workers", W,
      "must be <= " + std::to_string(max_workers_every_order) + " for pipeline_plan.order = all");
  const std::size_t sets = std::size_t{1} << W;
  std::vector<std::size_t> group_of(sets, 0);
  for (std::size_t g = 1; g < sets; ++g) {
    if (!any_size && (g & (g - 1)) != 0) continue;
    group_of[g] = t.groups.size();
    t.groups.emplace_back();
    for (std::size_t w = 0; w < W; ++w)
      if (g >> w & 1) t.groups.back().push_back(w);
  }
  t.moves.resize(sets);
  t.idle.assign(sets, -1);
  for (std::size_t used = 0; used < sets; ++used)
    t.free.push_back(W - static_cast<std::size_t>(std::popcount(used)));
  for (std::size_t used = 0; used < sets; ++used)
    for (std::size_t g = 1; g < sets; ++g)
      if ((g & used) == 0 && (any_size || (g & (g - 1)) == 0))
        t.moves[used].push_back({group_of[g], used | g});
}

inline group_table build_group_table(const planner_input& in, std::size_t m) {
  group_table t{in.layers.size(), m, in.config.global_batch / m, {}, {}, {}, {}, {}, {}};
  add_worker_states(in, t);
  const std::size_t L = t.layers, smax = std::min(L, in.workers.size());
  t.cost.resize((L + 1) * (L + 1) * t.groups.size());
  t.cut.assign(L + 1, 0);
  for (std::size_t j = 1; j < L; ++j) t.cut[j] = cut_seconds(in, j, t.rows);
  for (std::size_t g = 0; g < t.groups.size(); ++g) {
    for (std::size_t i = 0; i < L; ++i) {
      for (std::size_t j = i + 1; j <= L; ++j) {
        const auto c = evaluate_group(in, i, j, t.groups[g], m);
        auto& x = t.cost[t.at(i, j, g)];
        x.tau = c.tau;
        x.allreduce = c.allreduce;
        // Memory grows with S − s (1F1B) or not at all (GPipe): the largest S − s that fits.
        for (std::size_t r = 1; r <= smax; ++r) {
          if (!group_fits(in, i, j, t.groups[g], c.micro_batches, t.rows, r, 0)) break;
          x.fits_below = r;
        }
      }
    }
  }
  return t;
}

/// A partial plan in the DP: Σ τ + Σ x so far, the largest exposed all-reduce so far, and how
/// it was reached (its last stage: layers [i, j) on group g; prev: the label before).
struct plan_label {
  double sum, exposed;
  std::ptrdiff_t prev;
  std::size_t i, j, g;
};

/// Adds label `id` to a Pareto front of (sum, exposed), dropping what it dominates.
inline void add_to_front(std::vector<std::ptrdiff_t>& front, const std::vector<plan_label>& pool,
                         std::ptrdiff_t id) {
  const auto& n = pool[static_cast<std::size_t>(id)];
  for (auto f : front) {
    const auto& o = pool[static_cast<std::size_t>(f)];
    if (o.sum <= n.sum && o.exposed <= n.exposed) return;
  }
  std::erase_if(front, [&](std::ptrdiff_t f) {
    const auto& o = pool[static_cast<std::size_t>(f)];
    return n.sum <= o.sum && n.exposed <= o.exposed;
  });
  front.push_back(id);
}

/// The best plan of S stages whose largest stage or link time is exactly `cap`, if its J beats
/// `best`: J and the stages as (i, j, g).
struct pass_result {
  double j = std::numeric_limits<double>::infinity();
  std::vector<plan_label> stages;
};

inline pass_result plan_pass(const group_table& t, std::size_t S, double cap, double best) {
  const std::size_t L = t.layers, U = t.moves.size();
  const double fixed = static_cast<double>(t.m - 1) * cap;
  std::vector<plan_label> pool{{0, 0, -1, 0, 0, 0}};
  // front[((s·(L+1) + j)·U + state)·2 + hit]; states ascend along every move and idle step.
  std::vector<std::vector<std::ptrdiff_t>> front((S + 1) * (L + 1) * U * 2);
  const auto cell = [&](std::size_t s, std::size_t j, std::size_t u, bool hit) -> auto& {
    return front[((s * (L + 1) + j) * U + u) * 2 + (hit ? 1 : 0)];
  };
  cell(0, 0, 0, false).push_back(0);
  for (std::size_t s = 0; s < S; ++s) {
    const std::size_t left = S - s;  // stages still to place, this one included
    for (std::size_t i = s; i + left <= L; ++i) {
      const double cut = s > 0 ? t.cut[i] : 0.0;
      for (std::size_t u = 0; u < U; ++u) {
        for (const bool hit : {false, true}) {
          const auto labels = cell(s, i, u, hit);  // a copy: the idle step may grow another cell
          if (labels.empty() || t.free[u] < left) continue;
          if (t.idle[u] >= 0)
            for (auto id : labels)
              add_to_front(cell(s, i, static_cast<std::size_t>(t.idle[u]), hit), pool, id);
          if (cut > cap) continue;
          for (const auto& mv : t.moves[u]) {
            for (std::size_t j = i + 1; j + (left - 1) <= L; ++j) {
              const auto& c = t.cost[t.at(i, j, mv.group)];
              if (c.tau > cap || c.fits_below < left) continue;
              const bool now_hit = hit || c.tau == cap || (s > 0 && cut == cap);
              const double e = std::max(0.0, c.allreduce - static_cast<double>(s) * cap);
              for (auto id : labels) {
                const auto& o = pool[static_cast<std::size_t>(id)];
                const plan_label n{o.sum + c.tau + cut, std::max(o.exposed, e), id, i, j, mv.group};
                if (fixed + n.sum + n.exposed >= best) continue;
                pool.push_back(n);
                add_to_front(cell(s + 1, j, mv.to, now_hit), pool,
                             static_cast<std::ptrdiff_t>(pool.size() - 1));
              }
            }
          }
        }
      }
    }
  }
  pass_result r;
  std::ptrdiff_t arg = -1;
  for (std::size_t u = 0; u < U; ++u)
    for (auto id : cell(S, L, u, true)) {
      const auto& n = pool[static_cast<std::size_t>(id)];
      if (fixed + n.sum + n.exposed < r.j) r.j = fixed + n.sum + n.exposed, arg = id;
    }
  for (; arg > 0; arg = pool[static_cast<std::size_t>(arg)].prev)
    r.stages.push_back(pool[static_cast<std::size_t>(arg)]);
  std::reverse(r.stages.begin(), r.stages.end());
  return r;
}

/// Every value a stage or a link can take in this table: the candidate caps, ascending.
inline std::vector<double> candidate_caps(const group_table& t) {
  std::vector<double> caps(t.cut.begin() + 1, t.cut.end() - 1);
  for (const auto& c : t.cost)
    if (c.fits_below > 0) caps.push_back(c.tau);
  std::sort(caps.begin(), caps.end());
  caps.erase(std::unique(caps.begin(), caps.end()), caps.end());
  return caps;
}

}  // namespace detail

/// The most (layer range, worker range) cells plan_pipeline tabulates (24 bytes each): 48 layers
/// on 40 workers fit, 100 layers on 32 workers do not.
inline constexpr std::size_t max_planner_cells = std::size_t{1} << 22;

/// The best plan (least J) under the config, or nullopt when no plan fits the memory budgets.
/// Throws std::invalid_argument naming the field on invalid input (NaN or negative times or
/// sizes, a profile of the wrong length, no layers or workers, a bad config).
inline std::optional<pipeline_plan> plan_pipeline(std::span<const layer_profile> layers,
                                                  std::span<const worker_profile> workers,
                                                  const link_profile& link,
                                                  const pipeline_plan_config& config) {
  const detail::planner_input in{layers, workers, link, config};
  detail::validate_planner_input(in);
  const std::size_t L = layers.size(), W = workers.size(), smax = std::min(L, W);
  require((L + 1) * (L + 1) <= max_planner_cells / ((W + 1) * (W + 1)), "workers", W,
          "must keep (layers + 1)^2 (workers + 1)^2 <= " + std::to_string(max_planner_cells) +
              " (the planner's table of groups) with " + std::to_string(L) + " layers");
  double best = std::numeric_limits<double>::infinity();
  std::optional<pipeline_plan> plan;
  for (const std::size_t m : detail::candidate_micro_batches(config)) {
    const auto t = detail::build_group_table(in, m);
    for (const double cap : detail::candidate_caps(t)) {
      if (static_cast<double>(m) * cap >= best) break;  // J >= (M − 1)·K + K
      for (std::size_t S = 1; S <= smax; ++S) {
        auto r = detail::plan_pass(t, S, cap, best);
        if (!(r.j < best)) continue;
        std::vector<std::size_t> b{0};
        std::vector<std::vector<std::size_t>> groups;
        for (const auto& st : r.stages) {
          b.push_back(st.j);
          groups.push_back(t.groups[st.g]);
        }
        best = r.j;
        plan = detail::evaluate_plan(in, b, groups, m);
      }
    }
  }
  return plan;
}

/// plan_pipeline_exhaustive's limits: it enumerates every assignment of workers to stages (or
/// to idling), every set of layer boundaries and every candidate M.
inline constexpr std::size_t max_exhaustive_layers = 10;
inline constexpr std::size_t max_exhaustive_workers = 5;

namespace detail {

/// Whether stage labels (W entries, `idle` = idles) put each stage on a run of adjacent
/// positions of `order`, stage 0 first (idle workers only between stages, as in the DP).
inline bool contiguous_in(std::span<const std::size_t> stage_of, std::span<const std::size_t> order,
                          std::size_t idle) {
  std::size_t last = idle, prev = idle;
  for (std::size_t pos = 0; pos < order.size(); prev = stage_of[order[pos]], ++pos) {
    const std::size_t s = stage_of[order[pos]];
    if (s == idle) continue;
    if (last != idle && (s < last || (s == last && prev == idle))) return false;
    last = s;
  }
  return true;
}

inline void exhaustive_layers(const planner_input& in, std::size_t m,
                              const std::vector<std::vector<std::size_t>>& groups,
                              std::vector<std::size_t>& b, std::optional<pipeline_plan>& best) {
  const std::size_t S = groups.size(), L = in.layers.size();
  if (b.size() == S) {
    b.push_back(L);
    auto p = evaluate_plan(in, b, groups, m);
    if (p && (!best || p->predicted_step_s < best->predicted_step_s)) best = std::move(p);
    b.pop_back();
    return;
  }
  for (std::size_t j = b.back() + 1; j + (S - b.size()) <= L; ++j) {
    b.push_back(j);
    exhaustive_layers(in, m, groups, b, best);
    b.pop_back();
  }
}

}  // namespace detail

/// The optimum by enumeration: every M, every S, every assignment of each worker to a stage or
/// to idling (for order = given or by_speed only those whose groups are contiguous in that
/// order; with replication off, one worker per stage) and every layer split. The oracle for
/// plan_pipeline; refuses more than max_exhaustive_layers layers or max_exhaustive_workers workers.
inline std::optional<pipeline_plan> plan_pipeline_exhaustive(
    std::span<const layer_profile> layers, std::span<const worker_profile> workers,
    const link_profile& link, const pipeline_plan_config& config) {
  const detail::planner_input in{layers, workers, link, config};
  detail::validate_planner_input(in);
  require(layers.size() <= max_exhaustive_layers, "layers", layers.size(),
          "must be <= " + std::to_string(max_exhaustive_layers) + " for plan_pipeline_exhaustive");
  require(workers.size() <= max_exhaustive_workers, "workers", workers.size(),
          "must be <= " + std::to_string(max_exhaustive_workers) + " for plan_pipeline_exhaustive");
  const std::size_t W = workers.size();
  const auto order = detail::worker_order_of(in);
  std::optional<pipeline_plan> best;
  for (std::size_t S = 1; S <= std::min(layers.size(), W); ++S) {
    std::vector<std::size_t> stage_of(W, 0);  // S = idle; counts in base S + 1
    for (bool more = true; more;) {
      std::vector<std::vector<std::size_t>> groups(S);
      for (std::size_t w = 0; w < W; ++w)
        if (stage_of[w] < S) groups[stage_of[w]].push_back(w);
      const bool shaped = std::all_of(groups.begin(), groups.end(), [&](const auto& g) {
        return !g.empty() && (config.replication || g.size() == 1);
      });
      const bool ordered =
          config.order == worker_order::all || detail::contiguous_in(stage_of, order, S);
      if (shaped && ordered)
        for (const std::size_t m : detail::candidate_micro_batches(config)) {
          std::vector<std::size_t> b{0};
          detail::exhaustive_layers(in, m, groups, b, best);
        }
      more = false;
      for (std::size_t w = 0; w < W && !more; ++w) {
        if (++stage_of[w] <= S)
          more = true;
        else
          stage_of[w] = 0;
      }
    }
  }
  return best;
}

/// The even split, the baseline: layers in `stages` near-equal contiguous ranges (the first
/// L mod S one layer longer), workers in the config's order (given for order = all) in
/// near-equal contiguous groups (one each without replication), and the candidate M with the
/// least J that fits; nullopt when none fits.
inline std::optional<pipeline_plan> even_plan(std::size_t stages,
                                              std::span<const layer_profile> layers,
                                              std::span<const worker_profile> workers,
                                              const link_profile& link,
                                              const pipeline_plan_config& config) {
  const detail::planner_input in{layers, workers, link, config};
  detail::validate_planner_input(in);
  const std::size_t L = layers.size(), W = workers.size();
  require(stages >= 1 && stages <= std::min(L, W), "stages", stages,
          "must be in [1, min(layers, workers)] = [1, " + std::to_string(std::min(L, W)) + "]");
  const auto order = detail::worker_order_of(in);
  const std::size_t used = config.replication ? W : stages;
  std::vector<std::size_t> b{0};
  std::vector<std::vector<std::size_t>> groups;
  for (std::size_t s = 0, w = 0; s < stages; ++s) {
    b.push_back(b.back() + L / stages + (s < L % stages ? 1 : 0));
    const std::size_t n = used / stages + (s < used % stages ? 1 : 0);
    groups.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(w),
                        order.begin() + static_cast<std::ptrdiff_t>(w + n));
    w += n;
  }
  std::optional<pipeline_plan> best;
  for (const std::size_t m : detail::candidate_micro_batches(config)) {
    auto p = detail::evaluate_plan(in, b, groups, m);
    if (p && (!best || p->predicted_step_s < best->predicted_step_s)) best = std::move(p);
  }
  return best;
}

namespace detail {

inline void check_plan_shape(const pipeline_plan& plan, const planner_input& in) {
  const std::size_t L = in.layers.size(), W = in.workers.size(), B = in.config.global_batch;
  const std::size_t m = plan.micro_batches;
  require(m >= 1 && m <= B && B % m == 0, "pipeline_plan.micro_batches", m,
          "must divide global_batch (" + std::to_string(B) + ")");
  require(plan.micro_batch_rows == B / m, "pipeline_plan.micro_batch_rows", plan.micro_batch_rows,
          "must equal global_batch / micro_batches (" + std::to_string(B / m) + ")");
  require(!plan.stages.empty(), "pipeline_plan.stages", plan.stages.size(),
          "must hold at least one stage");
  std::vector<char> seen(W, 0);
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    const auto& st = plan.stages[s];
    const std::string p = "pipeline_plan.stages[" + std::to_string(s) + "].";
    const std::size_t first = s == 0 ? 0 : plan.stages[s - 1].end_layer;
    require(st.first_layer == first, p + "first_layer", st.first_layer,
            s == 0 ? "must be 0"
                   : "must equal stages[" + std::to_string(s - 1) + "].end_layer (" +
                         std::to_string(first) + ")");
    require(st.end_layer > st.first_layer && st.end_layer <= L, p + "end_layer", st.end_layer,
            "must be in (first_layer, layers] = (" + std::to_string(st.first_layer) + ", " +
                std::to_string(L) + "]");
    require(!st.workers.empty() && (in.config.replication || st.workers.size() == 1), p + "workers",
            st.workers.size(),
            in.config.replication ? "must name at least one worker"
                                  : "must name one worker (replication is off)");
    require_same_size(p + "micro_batches", st.micro_batches.size(), p + "workers",
                      st.workers.size());
    std::size_t total = 0;
    for (std::size_t g = 0; g < st.workers.size(); ++g) {
      const std::string q = p + "workers[" + std::to_string(g) + "]";
      require(st.workers[g] < W, q, st.workers[g],
              "must be < the number of workers (" + std::to_string(W) + ")");
      require(!seen[st.workers[g]], q, st.workers[g],
              "must not run more than one stage or appear twice");
      seen[st.workers[g]] = 1;
      total += st.micro_batches[g];
    }
    require(total == m, p + "micro_batches", total,
            "must sum to pipeline_plan.micro_batches (" + std::to_string(m) + ")");
  }
  require(plan.stages.back().end_layer == L,
          "pipeline_plan.stages[" + std::to_string(plan.stages.size() - 1) + "].end_layer",
          plan.stages.back().end_layer,
          "must equal the number of layers (" + std::to_string(L) + ")");
}

}  // namespace detail

/// Checks a given plan against the profiles: boundaries contiguous from 0 to L, every worker
/// known and used once, the micro-batch split summing to M, M dividing B, and every worker within
/// its memory budget (with the plan's own split). Throws std::invalid_argument naming the path,
/// e.g. 'pipeline_plan.stages[1].workers[0]' = 2: needs 3100000 bytes, over its budget 2000000.
inline void check_plan(const pipeline_plan& plan, std::span<const layer_profile> layers,
                       std::span<const worker_profile> workers, const link_profile& link,
                       const pipeline_plan_config& config) {
  const detail::planner_input in{layers, workers, link, config};
  detail::validate_planner_input(in);
  detail::check_plan_shape(plan, in);
  const std::size_t S = plan.stages.size();
  for (std::size_t s = 0; s < S; ++s) {
    const auto& st = plan.stages[s];
    for (std::size_t g = 0; g < st.workers.size(); ++g) {
      const double need =
          detail::worker_memory(in, st.first_layer, st.end_layer, plan.micro_batch_rows,
                                detail::in_flight_of(config, S, s, st.micro_batches[g]));
      const double budget = workers[st.workers[g]].memory_bytes;
      require(need <= budget,
              "pipeline_plan.stages[" + std::to_string(s) + "].workers[" + std::to_string(g) + "]",
              st.workers[g],
              "needs " + heterograd::detail::format_value(need) + " bytes, over its budget " +
                  heterograd::detail::format_value(budget));
    }
  }
}

}  // namespace heterograd::balance
