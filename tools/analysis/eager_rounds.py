#!/usr/bin/env python3
"""Round times of eager-SGD's majority rule under E6's injected imbalance (docs/experiments.md, E6).

n ranks; each step k ranks drawn at random take d more than the unit compute, and every job
pays the exchange c. Round t fires when its initiator (drawn uniformly per round) arrives; the
ranks that arrived by then take the result at the fire and start their next step there; a rank
that arrives after the fire takes the result at once and starts its next step at its own
arrival (its gradient goes into the next round). A synchronous round waits for every rank:
1 + d + c. The ablation (the table's last column) lets late ranks start at the fire instead (the
in-phase ceiling: (1 + d + c) / E[1 + c + d * 1{initiator delayed}]).

    python3 tools/analysis/eager_rounds.py            # d = 0.3 and 1.0, E6's n, k, c
"""
import argparse
import random


def mean_round(d, c, n, k, rounds, restart_at_fire, seed):
    rng = random.Random(seed)
    ready = [0.0] * n
    fire = 0.0
    for _ in range(rounds):
        delayed = set(rng.sample(range(n), k))
        arrive = [ready[i] + 1.0 + (d if i in delayed else 0.0) + c for i in range(n)]
        fire = arrive[rng.randrange(n)]
        ready = [fire if (a <= fire or restart_at_fire) else a for a in arrive]
    return fire / rounds


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--delays", type=float, nargs="+", default=[0.3, 1.0])
    p.add_argument("--exchange", type=float, default=0.103, help="c: E6's ring allreduce per job")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--delayed", type=int, default=4)
    p.add_argument("--rounds", type=int, default=200000)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    print("| d | synchronous round | eager majority round | per-round speed-up | late ranks start at the fire (ceiling) |")
    print("|---|---:|---:|---:|---:|")
    for d in a.delays:
        sync = 1.0 + d + a.exchange
        eager = mean_round(d, a.exchange, a.ranks, a.delayed, a.rounds, False, a.seed)
        ceil = mean_round(d, a.exchange, a.ranks, a.delayed, a.rounds, True, a.seed)
        print(f"| {d:g} | {sync:.4f} | {eager:.4f} | {sync / eager:.3f}x | {ceil:.4f} ({sync / ceil:.3f}x) |")


if __name__ == "__main__":
    main()
