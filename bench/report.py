#!/usr/bin/env python3
"""Prints the performance targets of heterograd's issues, one line each.

    report.py OUTDIR [suite ...]   reads OUTDIR/<suite>.json (Google Benchmark) and
                                   OUTDIR/<suite>-peers.json, evaluates bench/targets/<suite>.py
    report.py --gpu FILE.json ...  prints GPU benchmark figures, as fractions of device copy bandwidth

Each bench/targets/<suite>.py defines targets(bench, peers) -> list of Target, where bench
maps a benchmark's name to its Google Benchmark entry and peers is the peer JSON (or {}).
Every ratio is computed from the raw figures of the same run.
"""
import importlib.util
import json
import os
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass
class Target:
    name: str
    measured: float
    target: float
    op: str = ">="  # measured op target passes
    unit: str = "x"
    note: str = ""

    def passed(self):
        if self.measured is None:
            return False
        return self.measured >= self.target if self.op == ">=" else self.measured <= self.target


def load_bench(path):
    with open(path) as f:
        data = json.load(f)
    out = {}
    for b in data.get("benchmarks", []):
        if b.get("run_type") == "aggregate":
            continue
        out[b["name"]] = b
    return out, data.get("context", {})


def gbps(entry):
    return entry["bytes_per_second"] / 1e9


def load_targets(suite):
    path = os.path.join(HERE, "targets", f"{suite}.py")
    if not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location(f"hg_targets_{suite}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def main(argv):
    if len(argv) >= 2 and argv[0] == "--gpu":
        # GPU figures, each as a fraction of the device copy bandwidth (the kernels issue's
        # reference) when one of the files holds BM_device_copy.
        files = []
        for path in argv[1:]:
            try:
                files.append(load_bench(path) + (path,))
            except (OSError, ValueError) as e:
                print(f"{os.path.basename(path)}: unreadable ({e})")
        copy = next((e for b, _, _ in files for n, e in b.items() if n.startswith("BM_device_copy")), None)
        for bench, ctx, path in files:
            print(f"{os.path.basename(path)}: {ctx.get('host_name', '')}")
            for name, b in bench.items():
                bw = f"{gbps(b):8.1f} GB/s" if "bytes_per_second" in b else ""
                # The kernels suite times each call next to a copy and records the ratio of
                # the best calls (fraction_of_copy); elsewhere, the ratio of mean bandwidths.
                if "fraction_of_copy" in b:
                    frac = f"  {b['fraction_of_copy']:.2f} of copy (best calls, interleaved)"
                elif copy and "bytes_per_second" in b:
                    frac = f"  {b['bytes_per_second'] / copy['bytes_per_second']:.2f} of copy"
                else:
                    frac = ""
                print(f"  {name:50s} {b['real_time']:10.3f} {b['time_unit']}  {bw}{frac}")
        return 0
    outdir = argv[0] if argv else "out/bench"
    suites = argv[1:] or sorted(
        f[:-5] for f in os.listdir(outdir) if f.endswith(".json") and not f.endswith("-peers.json"))
    rows = []
    for s in suites:
        path = os.path.join(outdir, f"{s}.json")
        if not os.path.exists(path):
            continue
        mod = load_targets(s)
        if mod is None:
            continue
        bench, _ = load_bench(path)
        ppath = os.path.join(outdir, f"{s}-peers.json")
        peers = json.load(open(ppath)) if os.path.exists(ppath) else {}
        try:
            rows.extend(mod.targets(bench, peers))
        except KeyError as e:
            rows.append(Target(f"{s}: missing figure {e}", None, 0))
    print("\nperformance targets (measured in this run):")
    width = max([len(r.name) for r in rows] + [10])
    for r in rows:
        meas = "n/a" if r.measured is None else f"{r.measured:.3f}{r.unit}"
        verdict = "pass" if r.passed() else "FAIL"
        note = f"  ({r.note})" if r.note else ""
        print(f"  {r.name:{width}s}  {meas:>12s}  target {r.op} {r.target:g}{r.unit}  {verdict}{note}")
    with open(os.path.join(outdir, "targets.json"), "w") as f:
        json.dump([dict(r.__dict__, passed=r.passed()) for r in rows], f, indent=1)
    passed = sum(r.passed() for r in rows)
    print(f"targets: {passed} passed, {len(rows) - passed} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
