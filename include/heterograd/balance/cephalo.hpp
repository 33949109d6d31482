#pragma once
// A Cephalo-style memory-aware planner (Guo, Anand, Chen, Daudjee, "Cephalo: Harnessing
// Heterogeneous GPU Clusters for Training Transformer Models", ICS 2025; #20 in
// docs/references.md).
//
// Cephalo decouples compute from training state: device d runs micro-batches of m_d samples
// a_d times per step (gradient accumulation), so its compute follows its speed, while the
// sharded training state (parameters, gradients, optimizer moments; FSDP-style) is split
// unevenly, device d holding a fraction f_d of it, so that memory follows free memory.
// For a target global batch B this planner chooses (m_d, a_d, f_d) per device to
//     minimise   T = max_d a_d · (o_d + m_d · s_d)          (step compute time)
//     subject to Σ_d m_d · a_d = B,  Σ_d f_d = 1,  f_d = u_d / U (U shard units),
//                reserved_d + act · m_d + state · f_d <= capacity_d   for every d,
// with s_d seconds per sample, o_d a fixed overhead per micro-batch, act the activation
// bytes one sample keeps for the backward pass and state the bytes of the whole sharded
// state. Accumulation does not add activation memory (each micro-batch frees its own), so a
// device short of memory trades a smaller m_d for a larger a_d.
//
// Exact search: for a candidate T each device's options (n = m·a samples, headroom u_max)
// are known, and keeping the smallest feasible m for each n maximises its shard headroom;
// a dynamic programme over devices and samples then decides whether Σ n = B with
// Σ u_max >= U is reachable (O(D·B²)); a binary search over the finite set of option times
// finds the least T. Shards then go to the chosen devices in proportion to their headroom
// (Cephalo's "in proportion to free memory"), by largest remainder.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "heterograd/balance/measurement.hpp"
#include "heterograd/core/error.hpp"

namespace heterograd::balance {

/// Profiled throughput and memory of one device.
struct device_profile {
  double seconds_per_sample = 0;      ///< compute time per sample (forward + backward)
  double seconds_per_micro_batch = 0; ///< fixed time per micro-batch (launches, hooks)
  double memory_bytes = 0;            ///< capacity
  double reserved_bytes = 0;          ///< used whatever the plan (context, workspace, gathered layers)
  friend bool operator==(const device_profile&, const device_profile&) = default;
};

/// Memory model of the model being trained (the same on every device).
struct training_memory_model {
  double activation_bytes_per_sample = 0;  ///< activations one sample keeps for backward
  double state_bytes = 0;                  ///< parameters + gradients + optimizer state, total
  friend bool operator==(const training_memory_model&, const training_memory_model&) = default;
};

struct cephalo_config {
  std::size_t global_batch = 0;      ///< B: samples per optimizer step, over all devices
  std::size_t max_micro_batch = 0;   ///< largest m_d (0: B)
  std::size_t max_accumulation = 0;  ///< largest a_d (0: B)
  std::size_t shard_units = 1000;    ///< U: the state is split in units of 1/U
  friend bool operator==(const cephalo_config&, const cephalo_config&) = default;
};

struct device_plan {
  std::size_t micro_batch = 0;    ///< m_d
  std::size_t accumulation = 0;   ///< a_d
  std::size_t shard_units = 0;    ///< u_d (f_d = u_d / U)
  double shard_fraction = 0;      ///< f_d
  double compute_seconds = 0;     ///< a_d (o_d + m_d s_d)
  double memory_bytes = 0;        ///< reserved + act·m_d + state·f_d
  friend bool operator==(const device_plan&, const device_plan&) = default;
};

struct cephalo_plan {
  std::vector<device_plan> devices;
  double step_seconds = 0;  ///< max_d compute_seconds
  friend bool operator==(const cephalo_plan&, const cephalo_plan&) = default;
};

/// A device's speed from its measurements: the least-squares line t = o + m · s through the
/// points (m_k, t_k) = (samples_k / iterations_k, compute_time_k / iterations_k), each
/// measurement one point, clamped to o, s >= 0 (a negative coefficient is set to 0 and the
/// other refitted). Needs measurements at two or more different micro-batch sizes.
inline device_profile fit_device_profile(std::span<const worker_measurement> measured,
                                         double memory_bytes, double reserved_bytes = 0) {
  std::vector<double> x, y;
  for (std::size_t k = 0; k < measured.size(); ++k) {
    const auto& m = measured[k];
    detail::validate_measurement(m);
    require(m.samples > 0, "fit_device_profile.measured[" + std::to_string(k) + "].samples",
            m.samples, "must be > 0");
    x.push_back(static_cast<double>(m.samples) / static_cast<double>(m.iterations));
    y.push_back(m.compute_time.count() / static_cast<double>(m.iterations));
  }
  const double n = static_cast<double>(x.size());
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / std::max(n, 1.0);
  const double my = std::accumulate(y.begin(), y.end(), 0.0) / std::max(n, 1.0);
  double sxx = 0, sxy = 0, xx = 0, xy = 0;
  for (std::size_t k = 0; k < x.size(); ++k) {
    sxx += (x[k] - mx) * (x[k] - mx);
    sxy += (x[k] - mx) * (y[k] - my);
    xx += x[k] * x[k];
    xy += x[k] * y[k];
  }
  require(sxx > 0, "fit_device_profile.measured (micro-batch sizes)", x.size(),
          "must hold at least two different samples / iterations");
  device_profile p{sxy / sxx, my - (sxy / sxx) * mx, memory_bytes, reserved_bytes};
  if (p.seconds_per_sample < 0) p = {0, my, memory_bytes, reserved_bytes};
  if (p.seconds_per_micro_batch < 0) p = {xy / xx, 0, memory_bytes, reserved_bytes};
  return p;
}

/// Device d's compute time per step: a · (o + m · s).
inline double device_step_seconds(const device_profile& d, std::size_t micro_batch,
                                  std::size_t accumulation) {
  return static_cast<double>(accumulation) *
         (d.seconds_per_micro_batch + static_cast<double>(micro_batch) * d.seconds_per_sample);
}

/// Device d's peak memory: reserved + act · m + state · u / U.
inline double device_memory_bytes(const device_profile& d, const training_memory_model& model,
                                  std::size_t micro_batch, std::size_t units,
                                  std::size_t total_units) {
  return d.reserved_bytes + model.activation_bytes_per_sample * static_cast<double>(micro_batch) +
         model.state_bytes * (static_cast<double>(units) / static_cast<double>(total_units));
}

namespace detail {

inline void validate_cephalo(std::span<const device_profile> devices,
                             const training_memory_model& model, const cephalo_config& c) {
  require(!devices.empty(), "devices", devices.size(), "must name at least one device");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const auto& d = devices[i];
    const std::string p = "devices[" + std::to_string(i) + "].";
    require(std::isfinite(d.seconds_per_sample) && d.seconds_per_sample >= 0,
            p + "seconds_per_sample", d.seconds_per_sample, "must be finite and >= 0");
    require(std::isfinite(d.seconds_per_micro_batch) && d.seconds_per_micro_batch >= 0,
            p + "seconds_per_micro_batch", d.seconds_per_micro_batch, "must be finite and >= 0");
    require(std::isfinite(d.memory_bytes) && d.memory_bytes > 0, p + "memory_bytes",
            d.memory_bytes, "must be finite and > 0");
    require(std::isfinite(d.reserved_bytes) && d.reserved_bytes >= 0, p + "reserved_bytes",
            d.reserved_bytes, "must be finite and >= 0");
  }
  require(std::isfinite(model.activation_bytes_per_sample) &&
              model.activation_bytes_per_sample >= 0,
          "model.activation_bytes_per_sample", model.activation_bytes_per_sample,
          "must be finite and >= 0");
  require(std::isfinite(model.state_bytes) && model.state_bytes >= 0, "model.state_bytes",
          model.state_bytes, "must be finite and >= 0");
  require(c.global_batch >= devices.size(), "cephalo.global_batch", c.global_batch,
          "must be >= the number of devices (" + std::to_string(devices.size()) +
              "): every device computes");
  require_positive("cephalo.shard_units", c.shard_units);
}

/// The most shard units device d can hold next to a micro-batch of m (-1: m does not fit).
/// Decided with device_memory_bytes itself, so that a plan never exceeds it by rounding.
inline long long shard_headroom(const device_profile& d, const training_memory_model& model,
                                std::size_t m, std::size_t units) {
  if (device_memory_bytes(d, model, m, 0, units) > d.memory_bytes) return -1;
  if (model.state_bytes <= 0) return static_cast<long long>(units);
  const double free = d.memory_bytes - d.reserved_bytes -
                      model.activation_bytes_per_sample * static_cast<double>(m);
  double est = std::floor(free / model.state_bytes * static_cast<double>(units));
  long long u = est < 0 ? 0 : est > static_cast<double>(units) ? static_cast<long long>(units)
                                                                : static_cast<long long>(est);
  while (u > 0 && device_memory_bytes(d, model, m, static_cast<std::size_t>(u), units) >
                      d.memory_bytes) {
    --u;
  }
  while (u < static_cast<long long>(units) &&
         device_memory_bytes(d, model, m, static_cast<std::size_t>(u + 1), units) <=
             d.memory_bytes) {
    ++u;
  }
  return u;
}

struct cephalo_option {
  std::size_t m = 0;
  long long headroom = -1;  // -1: n samples are not possible within T
};

/// For each n in 1..B, device d's option with the most headroom among those with
/// m · a = n, m <= max_m, a <= max_a and a(o + m s) <= T (the smallest such m).
inline std::vector<cephalo_option> device_options(const device_profile& d,
                                                  const std::vector<long long>& headroom,
                                                  std::size_t global, std::size_t max_m,
                                                  std::size_t max_a, double t) {
  std::vector<cephalo_option> opt(global + 1);
  for (std::size_t m = max_m; m >= 1; --m) {  // descending: smaller m overwrites
    if (headroom[m] < 0) continue;
    for (std::size_t a = 1; a <= max_a && m * a <= global; ++a) {
      if (device_step_seconds(d, m, a) <= t) opt[m * a] = {m, headroom[m]};
    }
  }
  return opt;
}

struct cephalo_search {
  std::vector<std::vector<cephalo_option>> options;  // per device, per n
  std::vector<std::vector<std::size_t>> choice;      // per device, per reached total: n_d
  bool feasible = false;
};

/// Whether Σ n_d = B with Σ headroom >= U is reachable when every device finishes within t.
inline cephalo_search cephalo_feasible(std::span<const device_profile> devices,
                                       const std::vector<std::vector<long long>>& headroom,
                                       const cephalo_config& c, std::size_t max_m,
                                       std::size_t max_a, double t, bool keep_choices) {
  const std::size_t big_b = c.global_batch;
  const long long u_total = static_cast<long long>(c.shard_units);
  cephalo_search out;
  std::vector<long long> g(big_b + 1, -1), next(big_b + 1);
  g[0] = 0;
  for (std::size_t d = 0; d < devices.size(); ++d) {
    auto opt = device_options(devices[d], headroom[d], big_b, max_m, max_a, t);
    std::vector<std::size_t> choice(keep_choices ? big_b + 1 : 0, 0);
    std::fill(next.begin(), next.end(), -1);
    for (std::size_t n0 = 0; n0 < big_b; ++n0) {
      if (g[n0] < 0) continue;
      for (std::size_t n = 1; n0 + n <= big_b; ++n) {
        if (opt[n].headroom < 0) continue;
        const long long v = std::min(u_total, g[n0] + opt[n].headroom);
        if (v > next[n0 + n]) {
          next[n0 + n] = v;
          if (keep_choices) choice[n0 + n] = n;
        }
      }
    }
    g.swap(next);
    if (keep_choices) {
      out.options.push_back(std::move(opt));
      out.choice.push_back(std::move(choice));
    }
  }
  out.feasible = g[big_b] >= u_total;
  return out;
}

}  // namespace detail

/// The step-time-optimal plan, or nothing when no plan fits in the devices' memory.
inline std::optional<cephalo_plan> plan_cephalo(std::span<const device_profile> devices,
                                                const training_memory_model& model,
                                                const cephalo_config& config) {
  detail::validate_cephalo(devices, model, config);
  const std::size_t big_b = config.global_batch;
  const std::size_t units = config.shard_units;
  const std::size_t max_m = std::min(big_b, config.max_micro_batch ? config.max_micro_batch : big_b);
  const std::size_t max_a =
      std::min(big_b, config.max_accumulation ? config.max_accumulation : big_b);

  // Headroom per device and micro-batch, and every option's time (the candidate T).
  std::vector<std::vector<long long>> headroom(devices.size(),
                                               std::vector<long long>(max_m + 1, -1));
  std::vector<double> times;
  for (std::size_t d = 0; d < devices.size(); ++d) {
    for (std::size_t m = 1; m <= max_m; ++m) {
      headroom[d][m] = detail::shard_headroom(devices[d], model, m, units);
      if (headroom[d][m] < 0) continue;
      for (std::size_t a = 1; a <= max_a && m * a <= big_b; ++a) {
        times.push_back(device_step_seconds(devices[d], m, a));
      }
    }
  }
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  if (times.empty()) return std::nullopt;
  auto feasible = [&](double t) {
    return detail::cephalo_feasible(devices, headroom, config, max_m, max_a, t, false).feasible;
  };
  if (!feasible(times.back())) return std::nullopt;
  std::size_t lo = 0, hi = times.size() - 1;  // feasible(times[hi]) holds
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (feasible(times[mid])) hi = mid; else lo = mid + 1;
  }
  const auto search = detail::cephalo_feasible(devices, headroom, config, max_m, max_a,
                                               times[hi], true);

  // Walk the choices back from B, then give shards in proportion to headroom.
  cephalo_plan plan;
  plan.devices.resize(devices.size());
  std::vector<long long> room(devices.size());
  std::size_t left = big_b;
  for (std::size_t d = devices.size(); d-- > 0;) {
    const std::size_t n = search.choice[d][left];
    const auto& o = search.options[d][n];
    plan.devices[d].micro_batch = o.m;
    plan.devices[d].accumulation = n / o.m;
    room[d] = o.headroom;
    left -= n;
  }
  const double room_sum = std::accumulate(room.begin(), room.end(), 0.0);
  std::vector<double> frac(devices.size());
  std::size_t given = 0;
  for (std::size_t d = 0; d < devices.size(); ++d) {
    const double x = static_cast<double>(units) * static_cast<double>(room[d]) / room_sum;
    auto u = static_cast<long long>(std::floor(x));
    u = std::min(u, room[d]);
    plan.devices[d].shard_units = static_cast<std::size_t>(u);
    frac[d] = x - static_cast<double>(u);
    given += static_cast<std::size_t>(u);
  }
  std::vector<std::size_t> order(devices.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return frac[a] > frac[b]; });
  while (given < units) {  // terminates: Σ room >= U
    for (std::size_t d : order) {
      if (given == units) break;
      if (static_cast<long long>(plan.devices[d].shard_units) < room[d]) {
        ++plan.devices[d].shard_units;
        ++given;
      }
    }
  }
  for (std::size_t d = 0; d < devices.size(); ++d) {
    auto& p = plan.devices[d];
    p.shard_fraction = static_cast<double>(p.shard_units) / static_cast<double>(units);
    p.compute_seconds = device_step_seconds(devices[d], p.micro_batch, p.accumulation);
    p.memory_bytes = device_memory_bytes(devices[d], model, p.micro_batch, p.shard_units, units);
    plan.step_seconds = std::max(plan.step_seconds, p.compute_seconds);
  }
  return plan;
}

}  // namespace heterograd::balance
