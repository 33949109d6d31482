"""A Python gradient function in heterograd's simulator: Ringmaster ASGD and Rennala SGD (and
vanilla ASGD and local SGD for reference) on a least-squares problem, with heterogeneous worker
times.

Every worker holds the same data (the setting of Ringmaster ASGD's analysis, Maranjyan, Tyurin,
Richtarik, ICML 2025): f(x) = ||A x - b||^2 / (2 m), and a job computes a stochastic gradient on
a mini-batch drawn from (seed, worker, job), so the run is reproducible. Workers take
tau_i = 1 + sqrt(i) virtual seconds plus |N(0, i + 1)| noise per job (the authors' time model).

    PYTHONPATH=build/cpu-omp/python python examples/python/simulate.py [--tiny]

Prints, for each method, the loss reached, the server updates (local SGD: rounds), the gradients applied, buffered,
discarded and interrupted, the largest staleness applied, and the wall time per update.
"""

import argparse
import time

import numpy as np

import heterograd.sim as hgs


def least_squares(m: int, d: int, seed: int):
    """A, b with a known solution x* (b = A x* + small noise): loss(x) and grad(x, w, k)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, d)) / np.sqrt(d)
    x_star = rng.standard_normal(d)
    b = a @ x_star + 0.01 * rng.standard_normal(m)
    batch = 8

    def loss(x):
        r = a @ x.astype(np.float64) - b
        return float(r @ r / (2 * m))

    def grad(x, worker, job):
        # Mini-batch from (seed, worker, job): the same run gives the same gradients.
        idx = np.random.default_rng([seed, worker, job]).integers(0, m, batch)
        ab = a[idx]
        return ab.T @ (ab @ x - b[idx]) / batch

    return loss, grad


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tiny", action="store_true", help="a few hundred jobs (the tests' size)")
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    m, d, horizon = (64, 8, 60.0) if args.tiny else (2000, 50, 2000.0)
    loss, grad = least_squares(m, d, args.seed)
    n = args.workers
    times = hgs.sqrt_times(n, args.seed) + hgs.half_normal_noise(args.seed)
    x0 = np.zeros(d)
    print(f"least squares m={m} d={d}, {n} workers (tau_i = 1 + sqrt(i) + |N(0, i+1)|), "
          f"horizon {horizon:g}; loss at x0 {loss(x0):.4f}")
    print(f"{'method':<34} {'loss':>9} {'updates':>8} {'applied':>8} {'buffered':>8} "
          f"{'discarded':>9} {'interrupted':>11} {'max delay':>9} {'us/update':>9}")
    methods = [(f"Ringmaster R={n // 2}, interrupt", hgs.Ringmaster(threshold=n // 2, variant="interrupt")),
               (f"Ringmaster R={n // 2}, discard", hgs.Ringmaster(threshold=n // 2)),
               (f"Rennala B={n // 2}", hgs.Rennala(batch=n // 2)),
               ("vanilla ASGD", hgs.ASGD()),
               ("local SGD H=2 (rounds)", hgs.LocalSGD(period=2))]
    for label, method in methods:
        t0 = time.perf_counter()
        r = hgs.simulate(method, grad, x0, times, horizon=horizon, lr=0.05,
                         eval_interval=horizon / 10, eval=loss)
        wall = time.perf_counter() - t0
        hist = r.staleness["applied"]
        print(f"{label:<34} {r.metrics[-1, 0]:9.5f} {r.updates:8d} {r.applied.sum():8d} "
              f"{r.buffered.sum():8d} {r.discarded.sum():9d} {r.interrupted.sum():11d} "
              f"{max(len(hist) - 1, 0):9d} {1e6 * wall / max(r.updates, 1):9.1f}")


if __name__ == "__main__":
    main()
