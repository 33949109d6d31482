#!/usr/bin/env python3
"""heterograd.sim with a Python gradient against the Ringmaster authors' Python simulator
(./hg bench python, when HG_SIM_PEER names a checkout of it; issue 45).

    python_sim_bench.py OUT.json [--peer DIR] [--quick]

The experiment is E2's (docs/experiments.md): the worst-case quadratic (d = 1729, A = (L/4)
tridiag(-1, 2, -1), b = -(L/4) e_1, L = 1) from sqrt(d) e_1, one shared N(0, 0.01) scalar added
to a gradient, n = 1000 workers with tau_i = sqrt(i) (i = 1..n) plus |N(0, (0.05 tau_i)^2)| per
job: the authors' transport's time model (their ringmaster.py's `sqrt` heterogeneity and noise
scale), which is heterograd's fixed_times(tau) + half_normal_noise(scale=0.05). Both simulators
call the same Python object's stochastic_gradient for every job, so the gradient costs the same
and the difference is the simulator's own work. Methods: Ringmaster ASGD with calculation stops
(theirs: RingmasterASGD; ours: variant interrupt), R = 16, gamma = 0.08, and Rennala SGD (theirs:
RennalaSGD, which restarts every worker at each step; ours: stop_stale), B = 4, gamma = 1.

Each configuration runs --repeat times (default 3); the median wall time counts. Reported per
method: wall seconds and server updates over the same virtual horizon, microseconds
per update, gradient calls per update, and the ratio theirs / ours of the time per update
(> 1: heterograd is faster). Also ours with the gradient computed in C++ (Problem
worst_case_quadratic, no noise): the simulator without Python. The peer is never copied into
this repository: DIR is a checkout made by the user (GitHub vectozavr/ringmaster-lmo, its
src/asynchronous package; it imports torch and numpy).
"""
import argparse
import json
import statistics
import sys
import time

import numpy as np

import heterograd.sim as hgs


class Quadratic:
    """The worst-case quadratic with one shared noise scalar per gradient; counts its calls."""

    def __init__(self, d, sigma, seed):
        self.s = 0.25
        self.b = np.zeros(d)
        self.b[0] = self.s
        self.sigma = sigma
        self.rng = np.random.default_rng(seed)
        self.calls = 0
        self.seconds = 0.0  # inside stochastic_gradient

    def gradient(self, x):
        ax = 2 * x
        ax[1:] -= x[:-1]
        ax[:-1] -= x[1:]
        return self.s * ax + self.b

    def stochastic_gradient(self, point):
        t0 = time.perf_counter()
        g = self.gradient(point) + self.sigma * self.rng.normal()
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return g

    def value(self, point):
        return 0.5 * point @ (self.gradient(point) - self.b) - self.b @ point


def ours(method, fn, x0, tau, horizon, seed):
    times = hgs.fixed_times(list(tau)) + hgs.half_normal_noise(seed, scale=0.05)
    grad = fn if isinstance(fn, hgs.Problem) else (lambda x, worker, job: fn.stochastic_gradient(x))
    lr = 0.08 if method == "ringmaster" else 1.0
    m = hgs.Ringmaster(threshold=16, variant="interrupt") if method == "ringmaster" else hgs.Rennala(batch=4)
    t0 = time.perf_counter()
    r = hgs.simulate(m, grad, x0, times, horizon=horizon, lr=lr)
    return time.perf_counter() - t0, r.updates, r.jobs_finished.sum() + r.jobs_cancelled.sum()


def theirs(method, fn, x0, tau, horizon, seed, peer):
    sys.path.insert(0, peer)
    from src.asynchronous.algorithm import RennalaSGD, RingmasterASGD, StochasticGradientNodeAlgorithm
    from src.asynchronous.asynchronous_transport import RandomDelayedAsynchronousTransport
    from src.signature import Signature
    gen = np.random.default_rng(seed)

    def halfnormal(index):
        return np.abs(gen.normal(loc=0.0, scale=tau[index] * 0.05))

    nodes = [Signature(StochasticGradientNodeAlgorithm, fn) for _ in range(len(tau))]
    transport = RandomDelayedAsynchronousTransport(nodes, tau, halfnormal)
    if method == "ringmaster":
        opt = RingmasterASGD(transport, x0.copy(), max_delay=16, gamma=0.08)
    else:
        opt = RennalaSGD(transport, x0.copy(), gamma=1.0, batch_size=4)
    t0 = time.perf_counter()
    steps = 0
    while opt.get_time() < horizon:
        opt.step()
        steps += 1
    return time.perf_counter() - t0, steps


def measure(method, d, horizon, peer, seed=1, n=1000):
    """One configuration: each simulator's (wall s, updates, gradient calls, s inside grad)."""
    tau = np.sqrt(np.arange(1, n + 1, dtype=np.float64))
    x0 = np.zeros(d)
    x0[0] = np.sqrt(d)
    runs = {}
    fn = Quadratic(d, 0.1, seed)
    w, u, _ = ours(method, fn, x0, tau, horizon, seed)
    runs["hg_python"] = (w, u, fn.calls, fn.seconds)
    w, u, jobs = ours(method, hgs.worst_case_quadratic(d), x0, tau, horizon, seed)
    runs["hg_cxx"] = (w, u, int(jobs), 0.0)
    if peer:
        fn = Quadratic(d, 0.1, seed)
        w, u = theirs(method, fn, x0, tau, horizon, seed, peer)
        runs["authors"] = (w, u, fn.calls, fn.seconds)
    return runs


NAMES = {"hg_python": "heterograd.sim, Python grad", "hg_cxx": "heterograd.sim, C++ grad",
         "authors": "authors' simulator"}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--peer", help="a checkout of the authors' simulator (vectozavr/ringmaster-lmo)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--repeat", type=int, default=3, help="runs of each; the median wall time counts")
    args = p.parse_args()
    q = 0.25 if args.quick else 1.0
    configs = [("ringmaster", 1729, 200.0 * q), ("rennala", 1729, 40.0 * q),
               ("ringmaster", 16, 200.0 * q), ("rennala", 16, 40.0 * q)]
    rows = []
    print(f"{'method':<11} {'d':>5} {'simulator':<28} {'updates':>8} {'grads/upd':>9} {'wall s':>7} "
          f"{'us/update':>10} {'sim us/grad':>11}")
    for method, d, horizon in configs:
        reps = [measure(method, d, horizon, args.peer) for _ in range(max(args.repeat, 1))]
        # The same runs each time (same seeds): the median wall time and time inside grad.
        runs = {k: (statistics.median(r[k][0] for r in reps), reps[0][k][1], reps[0][k][2],
                    statistics.median(r[k][3] for r in reps)) for k in reps[0]}
        entry = {"name": f"BM_python_sim/{method}/d:{d}", "horizon": horizon, "workers": 1000, "dim": d}
        for key, (w, u, calls, inside) in runs.items():
            per_update = 1e6 * w / max(u, 1)
            # The simulator's own time per gradient call: wall time outside the gradient.
            overhead = 1e6 * (w - inside) / max(calls, 1)
            print(f"{method:<11} {d:5d} {NAMES[key]:<28} {u:8d} {calls / max(u, 1):9.1f} {w:7.2f} "
                  f"{per_update:10.1f} {overhead if key != 'hg_cxx' else float('nan'):11.2f}")
            entry.update({f"{key}_us_per_update": per_update, f"{key}_updates": u,
                          f"{key}_grads_per_update": calls / max(u, 1)})
            if key != "hg_cxx":
                entry[f"{key}_sim_us_per_grad"] = overhead
        if "authors" in runs:
            entry["authors_over_hg_python"] = entry["authors_us_per_update"] / entry["hg_python_us_per_update"]
            entry["authors_over_hg_python_sim"] = entry["authors_sim_us_per_grad"] / entry["hg_python_sim_us_per_grad"]
            print(f"{method:<11} {d:5d} authors / ours (Python grad): time per update "
                  f"{entry['authors_over_hg_python']:.1f}x, simulator time per gradient "
                  f"{entry['authors_over_hg_python_sim']:.1f}x")
        rows.append(entry)
    with open(args.out, "w") as f:
        json.dump({"benchmarks": rows}, f, indent=1)


if __name__ == "__main__":
    main()
