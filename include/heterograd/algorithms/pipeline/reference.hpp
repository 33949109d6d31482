#pragma once
// The references every pipeline runtime is compared with (issue 47, design §0.2-0.3).
//
// sequential_step: the whole model on one worker; micro-batches m = 0..M-1 in order, each
// through every stage forward, the loss and every stage backward, each row's loss weighted by
// 1 / B (B = the step's rows: a micro-batch's mean loss weighted by rows_m / B), gradients
// summed over the micro-batches, then one optimizer step per stage on its slice. In exact
// arithmetic this is one large-batch step; in floating point it is one when M = 1 (bitwise the
// unsplit network's full-batch step, tested), and for M > 1 the sum over micro-batches
// rounds differently from one B-row GEMM.
//
// simulate_pipeline: one thread executes every stage's op list of a GPipe or 1F1B schedule in
// the order a real pipeline with forward time 1 and backward time 2 per stage would run them
// (decoupled::execute_schedule). Synchronous update: a stage sums its slice's gradients over
// the M micro-batches and steps once per step. Because stage s runs its backwards in the order
// m = 0..M-1 under both schedules and touches only its slice, its gradient sum is formed in the
// same order as sequential_step's: the two are equal bitwise, whatever the schedule (tested).
// Asynchronous update (update.hpp): each stage steps after every backward, with stashing or
// SpecTrain as configured; each step's M micro-batches drain the pipeline at the step's end.
// Stage s still runs a fixed op list on inputs that arrive in that order and touches only its
// slice, so the run over threads or MPI ranks equals this one bitwise (tested).

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "heterograd/algorithms/decoupled/schedule.hpp"
#include "heterograd/algorithms/pipeline/concepts.hpp"
#include "heterograd/algorithms/pipeline/config.hpp"
#include "heterograd/algorithms/pipeline/update.hpp"
#include "heterograd/core/error.hpp"
#include "heterograd/core/span.hpp"

namespace heterograd::algorithms::pipeline {

namespace detail {
template <stage_model M>
span<float> stage_slice(const M& model, span<float> v, std::size_t s) {
  return v.subspan(model.stage_offset(s), model.stage_offset(s + 1) - model.stage_offset(s));
}
/// Each stage's optimizer steps its own slice with its slice of the summed gradient.
template <stage_model M, class Opt>
void step_stages(const M& model, span<float> params, std::vector<Opt>& per_stage, span<float> g) {
  for (std::size_t s = 0; s < model.stages(); ++s) {
    const auto gs = stage_slice(model, g, s);
    per_stage.at(s).step(stage_slice(model, params, s), span<const float>(gs.data(), gs.size()));
  }
}
template <stage_model M>
std::size_t total_rows(const M& model, const std::vector<batch_data>& mbs) {
  require_positive("pipeline.micro_batches", mbs.size());
  std::size_t B = 0;
  for (std::size_t m = 0; m < mbs.size(); ++m) {
    require_positive("pipeline.micro_batch[" + std::to_string(m) + "].rows", mbs[m].rows());
    require_same_size("pipeline.micro_batch[" + std::to_string(m) + "].x", mbs[m].x.size(),
                      "rows x input width", mbs[m].rows() * model.input_width(0));
    B += mbs[m].rows();
  }
  return B;
}
template <stage_model M>
void check_params(const M& model, std::size_t n) {
  require_same_size("pipeline.params", n, "the model's num_params", model.num_params());
}
}  // namespace detail

/// One step of the whole model on one worker over the micro-batches `mbs` (slot 0 of every
/// stage); per_stage[s] steps stage s. Returns the step's mean loss.
template <stage_model M, class Opt>
float sequential_step(M& model, span<float> params, std::vector<Opt>& per_stage,
                      const std::vector<batch_data>& mbs) {
  detail::check_params(model, params.size());
  require_same_size("pipeline.optimizers", per_stage.size(), "stages", model.stages());
  const std::size_t S = model.stages();
  const float scale = 1.0f / static_cast<float>(detail::total_rows(model, mbs));
  const span<const float> p(params.data(), params.size());
  std::vector<float> g(params.size(), 0.0f);
  std::vector<std::vector<float>> dx(S);
  float loss = 0;
  for (const auto& mb : mbs) {
    const float* in = mb.x.data();
    for (std::size_t s = 0; s < S; ++s) in = model.forward(s, 0, p, in, mb.rows()).data();
    for (std::size_t s = S; s-- > 0;) {
      dx[s].resize(s > 0 ? mb.rows() * model.input_width(s) : 0);
      if (s + 1 == S) {
        loss += model.loss_backward(0, p, span<const std::int32_t>(mb.y), scale, g, dx[s]);
      } else {
        model.backward(s, 0, p, dx[s + 1], g, dx[s]);
      }
    }
  }
  detail::step_stages(model, params, per_stage, g);
  return loss;
}

namespace detail {
/// Stage s's updater for the run: make_opt(slice size), the config's update rule, `slots`.
template <stage_model M, class MakeOpt>
auto make_updater(const M& model, MakeOpt& make_opt, const pipeline_config& cfg, std::size_t s,
                  std::size_t slots) {
  const std::size_t first = model.stage_offset(s), end = model.stage_offset(s + 1);
  return stage_updater<decltype(make_opt(std::size_t{}))>(make_opt(end - first), cfg, first, end,
                                                          model.num_params(), slots);
}

/// The micro-batches of steps [seg.first, seg.first + seg.count), in order, with each one's
/// step and that step's rows B.
struct segment_data {
  std::vector<batch_data> mbs;
  std::vector<std::size_t> step, batch_rows;
};
template <stage_model M>
segment_data load_segment(const M& model, const batch_source& source, segment seg,
                          std::size_t micro_batches) {
  segment_data d;
  for (std::size_t t = seg.first; t < seg.first + seg.count; ++t) {
    auto mbs = split_micro_batches(source(t), model.input_width(0), micro_batches);
    const std::size_t B = total_rows(model, mbs);
    for (auto& mb : mbs) {
      d.mbs.push_back(std::move(mb));
      d.step.push_back(t);
      d.batch_rows.push_back(B);
    }
  }
  return d;
}

/// One segment (a stream of N micro-batches, drained at its end) in simulated order; adds each
/// micro-batch's loss term to r.losses[its step], grows r.peak_in_flight[s] to stage s's most in
/// flight and adds to r.stages[s] the bytes a transport run sends and the micro-batches.
/// Returns the simulated schedule's {idle, busy + idle} stage time (forward 1, backward 2).
template <stage_model M, class Upd>
std::pair<double, double> simulate_segment(M& model, span<float> params, std::vector<Upd>& upd,
                                           const pipeline_config& cfg, const segment_data& d,
                                           pipeline_report& r) {
  const std::size_t S = model.stages(), N = d.mbs.size();
  const bool async = upd.front().asynchronous();
  const auto sch = schedule_for(cfg, S, N);
  constexpr double fwd = 1.0, bwd = 2.0;  // the simulated times of a forward and a backward
  const auto st =
      decoupled::execute_schedule(sch, std::vector<double>(S, fwd), std::vector<double>(S, bwd), N);
  std::vector<std::vector<std::size_t>> versions;
  for (std::size_t s = 0; s < S; ++s) versions.push_back(versions_until_backward(sch[s], N));
  std::vector<slot_pool> pools(S, slot_pool(N));
  const span<const float> p(params.data(), params.size());
  std::vector<float> g(params.size(), 0.0f);
  // act[s][k]: stage s's output for k (the message to s + 1); grad[s][k]: d/d(its input).
  std::vector<std::vector<std::vector<float>>> act(S, std::vector<std::vector<float>>(N)),
      grad = act;
  for (const auto& t : st.order) {
    const std::size_t s = t.stage, k = t.op.micro_batch, rows = d.mbs[k].rows();
    if (t.op.kind == decoupled::pass::forward) {
      const float* in = s == 0 ? d.mbs[k].x.data() : act[s - 1][k].data();
      const std::size_t slot = pools[s].take(k);
      const auto out =
          model.forward(s, slot, upd[s].forward_weights(p, slot, versions[s][k]), in, rows);
      if (s + 1 < S) r.stages[s].bytes_sent += header_bytes + out.size() * sizeof(float);
      if (s == 0 && S > 1) r.stages[s].bytes_sent += header_bytes + rows * sizeof(std::int32_t);
      if (s + 1 < S) act[s][k].assign(out.begin(), out.end());
      if (s > 0) std::vector<float>().swap(act[s - 1][k]);
      continue;
    }
    const std::size_t slot = pools[s].give(k), B = d.batch_rows[k];
    const auto w = upd[s].backward_weights(p, slot);
    grad[s][k].resize(s > 0 ? rows * model.input_width(s) : 0);
    if (s + 1 == S) {
      const float l = model.loss_backward(slot, w, span<const std::int32_t>(d.mbs[k].y),
                                          loss_scale(async, rows, B), g, grad[s][k]);
      r.losses.at(d.step[k]) += step_loss_term(async, l, rows, B);
    } else {
      model.backward(s, slot, w, grad[s + 1][k], g, grad[s][k]);
      std::vector<float>().swap(grad[s + 1][k]);
    }
    upd[s].after_backward(params, g);
    if (s > 0) r.stages[s].bytes_sent += header_bytes + grad[s][k].size() * sizeof(float);
    ++r.stages[s].micro_batches;
  }
  for (auto& u : upd) u.end_step(params, g);
  for (std::size_t s = 0; s < S; ++s)
    r.peak_in_flight[s] = std::max(r.peak_in_flight[s], pools[s].peak());
  const double all = static_cast<double>(S) * st.makespan;
  return {all - (fwd + bwd) * static_cast<double>(S * N), all};
}
}  // namespace detail

/// `steps` pipeline steps in one thread (see the top of this file); batch t comes from
/// source(t), split into cfg.micro_batches; asynchronous runs stream drain_every steps' micro-
/// batches before draining. make_opt(slice size) makes stage s's optimizer. The report has
/// every step's loss, each stage's peak in-flight micro-batches and stashes, the bytes each stage
/// of a transport run sends and its micro-batches (no times: telemetry's seconds stay 0), the
/// theoretical bubble and, as measured_bubble, the idle fraction of the simulated schedule.
template <stage_model M, class MakeOpt>
pipeline_report simulate_pipeline(M& model, std::vector<float>& params, MakeOpt make_opt,
                                  const pipeline_config& cfg, const batch_source& source,
                                  std::size_t steps) {
  cfg.validate();
  detail::check_params(model, params.size());
  const std::size_t S = model.stages(), Mb = cfg.micro_batches;
  std::vector<decltype(detail::make_updater(model, make_opt, cfg, 0, Mb))> upd;
  for (std::size_t s = 0; s < S; ++s)
    upd.push_back(detail::make_updater(model, make_opt, cfg, s, Mb));
  pipeline_report report;
  report.losses.assign(steps, 0.0f);
  report.peak_in_flight.assign(S, 0);
  report.stages.assign(S, {});
  double idle = 0, all = 0;
  for (const auto seg : segments_of(cfg, steps)) {
    const auto [i, a] = detail::simulate_segment(model, span<float>(params), upd, cfg,
                                                 detail::load_segment(model, source, seg, Mb),
                                                 report);
    idle += i;
    all += a;
  }
  report.theoretical_bubble = theoretical_bubble(cfg, S, steps);
  report.measured_bubble = all > 0 ? idle / all : 0.0;
  for (std::size_t s = 0; s < S; ++s) {
    report.peak_stashes.push_back(upd[s].peak_stashes());
    report.staleness.push_back(upd[s].staleness());
  }
  return report;
}

}  // namespace heterograd::algorithms::pipeline
