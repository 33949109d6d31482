#!/usr/bin/env python3
"""DSSP's controller decisions on a measured or a simulated arrival sequence (docs/experiments.md, E9).

A port of balance::dssp_controller's on_push (include/heterograd/balance/dssp.hpp; Zhao, An,
Liu, Chen, "Dynamic Stale Synchronous Parallel Distributed Training for Deep Learning",
ICDCS 2019) and of dssp_server's hold / release order (algorithms/async/ssp.hpp), fed with
either a real run's arrivals (its real_jobs.csv: worker,start,duration in model units, in
arrival order) or a simulated run of fixed per-worker job times tau_w, optionally plus an
overhead and an exponential jitter per job (the real clock's pull / push and noise). It counts
what the controller decided: proceeds within s_L, grants (and r*), proceeds on credits, waits,
and the model units workers spent held. Fixed membership only (no leave / join).

    python3 tools/analysis/dssp_decisions.py --trace OUT/dssp-s-l-3-r-max-12/real_jobs.csv
    python3 tools/analysis/dssp_decisions.py --tau OUT/dssp-s-l-3-r-max-12/predicted/workers.csv
    python3 tools/analysis/dssp_decisions.py --tau 2,4,5,7,3,8,6,1 --overhead 0.03 --jitter 0.25
"""
import argparse
import csv
import heapq
import math
import random


class Controller:
    """balance::dssp_controller: clocks, credits and the last two push times per worker."""

    def __init__(self, n, lower, rng):
        self.lower, self.rng = lower, rng
        self.pushes, self.credits = [0] * n, [0] * n
        self.last, self.previous = [0.0] * n, [0.0] * n

    def gap(self, p):
        return self.pushes[p] - min(self.pushes)

    def can_proceed(self, p):
        return self.gap(p) <= self.lower

    def on_push(self, p, t):
        """(proceed?, granted r*) after worker p's push at time t."""
        self.previous[p], self.last[p] = self.last[p], t
        self.pushes[p] += 1
        g = self.gap(p)
        if g <= self.lower:
            self.credits[p] = 0
            return True, 0
        if self.credits[p] > 0 and g <= self.lower + self.rng:
            self.credits[p] -= 1
            return True, 0
        self.credits[p] = 0
        if self.pushes[p] == max(self.pushes):
            r = self.grant(p, g)
            if r > 0:
                self.credits[p] = r - 1
                return True, r
        return False, 0

    def grant(self, p, g):
        s = min(range(len(self.pushes)), key=lambda i: (self.pushes[i], i))
        if self.pushes[p] < 2 or self.pushes[s] < 2 or s == p or g > self.lower + self.rng:
            return 0
        i_f = self.last[p] - self.previous[p]
        i_s = self.last[s] - self.previous[s]
        best_k, best = 0, math.inf
        for k in range(min(self.rng, self.lower + self.rng + 1 - g) + 1):
            fk = self.last[p] + k * i_f
            if i_s <= 0:
                d = abs(fk - self.last[s])
            else:
                j = max(0.0, math.floor((fk - self.last[s]) / i_s - 1.0))
                d = min(abs(fk - (self.last[s] + (j + 1) * i_s)), abs(fk - (self.last[s] + (j + 2) * i_s)))
            if d < best:
                best, best_k = d, k
        return best_k


class Tally:
    def __init__(self, n, r_max):
        self.rows = {"pushes": 0, "proceed (gap <= s_L)": 0, "grants": 0, "proceed on credit": 0, "waits": 0}
        self.r = [0] * (r_max + 1)
        self.held, self.held_since = [0.0] * n, [None] * n  # held: from a wait to the next start

    def push(self, w, t, decision, within_lower):
        proceed, r = decision
        self.rows["pushes"] += 1
        if not proceed:
            self.rows["waits"] += 1
            self.held_since[w] = t
        elif r > 0:
            self.rows["grants"] += 1
            self.r[r] += 1
        else:
            self.rows["proceed (gap <= s_L)" if within_lower else "proceed on credit"] += 1

    def start(self, w, t):
        if self.held_since[w] is not None:
            self.held[w] += t - self.held_since[w]
            self.held_since[w] = None


def replay(rows, n, lower, r_max):
    """A measured run: its arrivals in order; a held worker's next start is its release."""
    c, tally = Controller(n, lower, r_max), Tally(n, r_max)
    for w, start, end in rows:
        tally.start(w, start)
        tally.push(w, end, c.on_push(w, end), c.gap(w) <= lower)
    return tally


def simulate(tau, horizon, lower, r_max, overhead, jitter, seed):
    """runtime::async_runtime with dssp_server: events in (time, scheduling order); after a push
    the held workers that may go on restart first (in worker order), then the pusher."""
    n, rand = len(tau), random.Random(seed)
    c, tally, waiting, heap, seq = Controller(n, lower, r_max), Tally(n, r_max), [False] * n, [], 0

    def restart(w, t):
        nonlocal seq
        tally.start(w, t)
        d = tau[w] + overhead + (rand.expovariate(1.0 / jitter) if jitter > 0 else 0.0)
        heapq.heappush(heap, (t + d, seq, w))
        seq += 1

    for w in range(n):
        restart(w, 0.0)
    while heap and heap[0][0] <= horizon:
        t, _, w = heapq.heappop(heap)
        decision = c.on_push(w, t)
        tally.push(w, t, decision, c.gap(w) <= lower)
        for j in range(n):
            if j != w and waiting[j] and c.can_proceed(j):
                waiting[j] = False
                restart(j, t)
        if decision[0]:
            restart(w, t)
        else:
            waiting[w] = True
    return tally  # as in a trace, a worker still held at the end adds nothing


def read_trace(path):
    with open(path) as f:
        rows = [(int(r["worker"]), float(r["start"]), float(r["start"]) + float(r["duration"]))
                for r in csv.DictReader(line for line in f if not line.startswith("#"))]
    return rows, 1 + max(r[0] for r in rows)


def read_tau(text):
    if "," in text or text.replace(".", "").isdigit():
        return [float(x) for x in text.split(",")]
    with open(text) as f:  # a run's workers.csv: its model_time column
        return [float(r["model_time"]) for r in csv.DictReader(line for line in f if not line.startswith("#"))]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", help="a real run's real_jobs.csv")
    src.add_argument("--tau", help="tau_w, comma-separated, or a run's workers.csv (model_time column)")
    p.add_argument("--lower", type=int, default=3, help="s_L")
    p.add_argument("--range", type=int, default=12, help="r_max")
    p.add_argument("--horizon", type=float, default=1800.0, help="model units (simulation)")
    p.add_argument("--overhead", type=float, default=0.0, help="model units added to every job (simulation)")
    p.add_argument("--jitter", type=float, default=0.0, help="mean of an exponential added to every job")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.trace:
        rows, n = read_trace(a.trace)
        t = replay(rows, n, a.lower, a.range)
    else:
        tau = read_tau(a.tau)
        n = len(tau)
        t = simulate(tau, a.horizon, a.lower, a.range, a.overhead, a.jitter, a.seed)
    grants = sum(t.r)
    mean_r = sum(k * x for k, x in enumerate(t.r)) / grants if grants else 0.0
    print(" | ".join(f"{k} {v}" for k, v in t.rows.items()) +
          f" | mean r* {mean_r:.2f} | r* = {a.range}: {t.r[a.range]} | held {sum(t.held):.0f} units")
    print("held per worker (units): " + ", ".join(f"{h:.0f}" for h in t.held))


if __name__ == "__main__":
    main()
