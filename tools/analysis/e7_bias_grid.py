#!/usr/bin/env python3
"""E7's bias gain against the sampling bias and the slow workers' share (docs/experiments.md, E7).

Writes one heterograd-run configuration per cell of the grid (E7's MLP setup,
examples/experiments/e7_biased_local_sgd.json, with n workers of which S are slow, the fast
ones at H_fast steps per round and the slow ones at 1, a slow step lasting H_fast fast ones),
each with local SGD (unbiased) and biased local SGD at candidate-pool ratios r; then, from the
runs' outputs, prints each cell's final test accuracies and the paired gain (biased - unbiased,
same seed) with a 95% Student-t interval over the seeds.

    python3 tools/analysis/e7_bias_grid.py write out/e7grid/configs
    for f in out/e7grid/configs/*.json; do
      build/cpu-omp/tools/heterograd-run $f --seeds 1,2,3,4,5 --jobs 2 -q --out out/e7grid/runs/$(basename $f .json); done
    python3 tools/analysis/e7_bias_grid.py table out/e7grid/runs
    python3 tools/analysis/e7_bias_grid.py bias out/e7grid/runs    # the slow workers' sample bias
    # the longer horizon, three cells:
    python3 tools/analysis/e7_bias_grid.py write out/e7long/configs --epochs 8 --cells 5:1:32,10:2:32,5:2:4
"""
import argparse
import json
import math
import os
import statistics

# (n, S, H_fast): the share of the samples the slow workers train on is S / (S + (n - S) H_fast).
CELLS = [(n, s, h) for n in (5, 10) for s in (1, 2) for h in (4, 8, 32)]
# The candidate-pool ratios besides the authors' r = 4 (r = 1: the pool is the slow workers'
# samples, a uniform draw; r = 16: the top quarter of r = 4's pool, or the whole set's top).
RATIOS = (1, 16)
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def t95(df):
    """Student t's two-sided 95% quantile; above 9 degrees the one of 30 (2.042), an upper bound."""
    return T95.get(df, 2.042 if df >= 30 else 2.262)


def name_of(n, s, h):
    return f"e7grid_n{n}_s{s}_h{h}"


def config(n, s, h, train, epochs):
    slow = list(range(s))
    steps = [1] * s + [h] * (n - s)
    per_round = 64 * (s + (n - s) * h)
    total_time = epochs * train / per_round * h  # virtual time units of the run
    base = {"algorithm": "biased_local_sgd", "slow_workers": slow, "local_steps": steps}
    methods = [dict(base, label="unbiased", biased=False), dict(base, label="biased r=4", biased=True, ratio=4)]
    methods += [dict(base, label=f"biased r={r}", biased=True, ratio=r) for r in RATIOS]
    return {
        "name": name_of(n, s, h),
        "title": f"E7 bias grid: {s} slow of {n}, H_fast {h}",
        "seed": 1,
        "data": {"dataset": "fashion_mnist", "batch": 64, "train_samples": train},
        "model": {"kind": "mlp", "hidden": [64]},
        "optimizer": {"kind": "momentum", "lr": 0.05, "momentum": 0.9},
        "workers": {"count": n, "time": {"base": "speed_classes",
                                         "classes": [{"count": s, "time": h}, {"count": n - s, "time": 1}]}},
        "horizon": {"epochs": epochs},
        "eval_interval": max(1.0, round(total_time / 4, 1)),
        "target": {"metric": "accuracy", "value": 0.83},
        "methods": methods,
    }


def write(folder, train, epochs, cells):
    os.makedirs(folder, exist_ok=True)
    for n, s, h in cells:
        with open(os.path.join(folder, name_of(n, s, h) + ".json"), "w") as f:
            json.dump(config(n, s, h, train, epochs), f, indent=1)


def interval(xs):
    m = statistics.mean(xs)
    if len(xs) < 2:
        return m, float("nan")
    return m, t95(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))


def cell_rows(summary):
    """{label: {seed: final accuracy}} from a multi-seed summary.json."""
    out = {}
    for m in summary["methods"]:
        out[m["label"]] = {p["seed"]: p["final"]["accuracy"] for p in m["per_seed"]}
    return out


def fmt(m, h, scale=100.0):
    return f"{m * scale:+.2f} ± {h * scale:.2f}"


def slope(points):
    """Least-squares slope of y on x with its 95% half-width (Student t, len - 2 degrees)."""
    n = len(points)
    mx = statistics.mean(x for x, _ in points)
    my = statistics.mean(y for _, y in points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    resid = sum((y - my - b * (x - mx)) ** 2 for x, y in points)
    se = math.sqrt(resid / (n - 2) / sxx)
    return b, t95(n - 2) * se


def table(folder):
    labels = ("biased r=1", "biased r=4", "biased r=16")
    print("| slow / n | H_fast | slow workers' share of the samples | unbiased | "
          "r=1 − unbiased (pp) | r=4 − unbiased (pp) | r=16 − unbiased (pp) | r=4 − r=1 (pp) | r=16 − r=1 (pp) |")
    print("|---|---|---|---|---|---|---|---|---|")
    pooled = {k: [] for k in ("r4", "r4r1", "r16r1")}
    for n, s, h in sorted(CELLS, key=lambda c: c[1] / (c[1] + (c[0] - c[1]) * c[2])):
        path = os.path.join(folder, name_of(n, s, h), "summary.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            rows = cell_rows(json.load(f))
        un = rows["unbiased"]
        seeds = sorted(un)
        share = s / (s + (n - s) * h)
        m_un, h_un = interval([un[k] for k in seeds])
        cols = [fmt(*interval([rows[label][k] - un[k] for k in seeds])) for label in labels]
        r1 = rows["biased r=1"]
        cols.append(fmt(*interval([rows["biased r=4"][k] - r1[k] for k in seeds])))
        cols.append(fmt(*interval([rows["biased r=16"][k] - r1[k] for k in seeds])))
        pooled["r4"] += [(share, rows["biased r=4"][k] - un[k]) for k in seeds]
        pooled["r4r1"] += [(share, rows["biased r=4"][k] - r1[k]) for k in seeds]
        pooled["r16r1"] += [(share, rows["biased r=16"][k] - r1[k]) for k in seeds]
        print(f"| {s} / {n} | {h} | 1/{1 / share:.0f} ({100 * share:.1f} %) | {m_un:.4f} ± {h_un:.4f} | "
              + " | ".join(cols) + " |")
    for key, what in (("r4", "r=4 − unbiased"), ("r4r1", "r=4 − r=1"), ("r16r1", "r=16 − r=1")):
        pts = pooled[key]
        if len(pts) < 3:
            continue
        ys = [y for _, y in pts]
        m = statistics.mean(ys)
        hw = interval(ys)[1]
        b, hb = slope(pts)
        print(f"pooled {what}: {fmt(m, hw)} pp over {len(pts)} paired runs; "
              f"slope against the share {10 * b:+.2f} ± {10 * hb:.2f} pp per 10 points of share")


def bias(folder):
    """The slow workers' samples: mean score over the mean of all seen samples, and the share unseen."""
    methods = ("unbiased", "biased-r-1", "biased-r-4", "biased-r-16")
    print("| slow / n | H_fast | " + " | ".join(f"{m}: score ratio, unseen" for m in methods) + " |")
    print("|---|---|" + "---|" * len(methods))
    for n, s, h in sorted(CELLS, key=lambda c: c[1] / (c[1] + (c[0] - c[1]) * c[2])):
        cell = os.path.join(folder, name_of(n, s, h))
        if not os.path.isdir(cell):
            continue
        cols = []
        for m in methods:
            ratios, unseen = [], []
            for seed_dir in sorted(d for d in os.listdir(cell) if d.startswith("seed-")):
                path = os.path.join(cell, seed_dir, m, "summary.json")
                if os.path.exists(path):
                    with open(path) as f:
                        ex = json.load(f)["extra"].get("slow_samples")
                    if ex:
                        ratios.append(ex["mean_score_ratio"])
                        unseen.append(ex["unseen_fraction"])
            cols.append(f"{statistics.mean(ratios):.2f}x, {100 * statistics.mean(unseen):.0f} %" if ratios else "")
        print(f"| {s} / {n} | {h} | " + " | ".join(cols) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["write", "table", "bias"])
    ap.add_argument("folder")
    ap.add_argument("--train", type=int, default=60000, help="data.train_samples")
    ap.add_argument("--epochs", type=float, default=2.0, help="horizon.epochs")
    ap.add_argument("--cells", default="", help="only these cells, n:S:H_fast comma-separated")
    a = ap.parse_args()
    cells = [tuple(int(v) for v in c.split(":")) for c in a.cells.split(",")] if a.cells else CELLS
    if a.what == "write":
        write(a.folder, a.train, a.epochs, cells)
    elif a.what == "table":
        table(a.folder)
    else:
        bias(a.folder)


if __name__ == "__main__":
    main()
