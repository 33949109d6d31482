#!/usr/bin/env python3
"""Prints the performance targets of heterograd's issues, one line each.

    report.py OUTDIR [suite ...]   reads OUTDIR/<suite>.json (Google Benchmark) and
                                   OUTDIR/<suite>-peers.json, evaluates bench/targets/<suite>.py
    report.py --gpu FILE.json ...  prints GPU benchmark figures, as fractions of device copy bandwidth

Each bench/targets/<suite>.py defines targets(bench, peers) -> list of Target, where bench
maps a benchmark's name to its Google Benchmark entry and peers is the peer JSON (or {}).
Every ratio is computed from the raw figures of the same run.

Benchmarks name every argument (bench/bench_args.hpp): BM_sgd/threads:2/min_time:1.000/
manual_time. Targets look entries up by base name and arguments with need(bench, "BM_sgd",
threads=2), which ignores the run settings (min_time, iterations, real_time, ...). Each target
is computed inside `with guard(rows, name):`, so that one missing figure costs one row:
  - the benchmark ran, but not with that argument (a --threads list without 2, the default
    thread range of a 1-core machine): the row is skipped, with the reason;
  - the benchmark is missing from the run (renamed, filtered out): the row fails.
"""
import contextlib
import importlib.util
import json
import os
import sys
from dataclasses import dataclass

# Name parts that are run settings rather than a benchmark's arguments.
RUN_KEYS = {"min_time", "min_warmup_time", "iterations", "repeats"}
RUN_WORDS = {"real_time", "manual_time"}

HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass
class Target:
    name: str
    measured: float
    target: float
    op: str = ">="  # measured op target passes
    unit: str = "x"
    note: str = ""
    skipped: str = ""  # why the target could not be evaluated in this run (not a failure)

    def passed(self):
        if self.measured is None or self.skipped:
            return False
        return self.measured >= self.target if self.op == ">=" else self.measured <= self.target


class Skip(Exception):
    """A figure this run did not measure by choice (an argument outside its ranges)."""


def parse_name(name):
    """'BM_x/threads:2/min_time:1.000/real_time' -> ('BM_x', {'threads': '2'})."""
    parts = name.split("/")
    args = {}
    for i, p in enumerate(parts[1:]):
        if p in RUN_WORDS:
            continue
        k, sep, v = p.partition(":")
        if not sep:
            args[f"#{i}"] = p  # an unnamed argument
        elif k not in RUN_KEYS:
            args[k] = v
    return parts[0], args


def entries(bench, base):
    """[(args, entry)] of every run of benchmark `base`."""
    out = []
    for name, e in bench.items():
        b, args = parse_name(name)
        if b == base:
            out.append((args, e))
    return out


def find(bench, base, **args):
    """The entry of `base` with exactly these arguments, or None."""
    want = {k: str(v) for k, v in args.items()}
    for a, e in entries(bench, base):
        if a == want:
            return e
    return None


def need(bench, base, **args):
    """As find(), but raises Skip when `base` ran without one of these argument values, and
    KeyError when `base` did not run at all (or lacks the combination though every value ran)."""
    e = find(bench, base, **args)
    if e is not None:
        return e
    runs = entries(bench, base)
    if not runs:
        raise KeyError(base)
    for k, v in args.items():
        ran = arg_values(bench, base, k)
        if str(v) not in {str(x) for x in ran}:
            have = ",".join(str(x) for x in ran) or "none"
            raise Skip(f"{base} not run with {k}={v} (this run's {k}: {have})")
    raise KeyError(f"{base} with " + ", ".join(f"{k}={v}" for k, v in args.items()))


def arg_values(bench, base, key):
    """The sorted values of argument `key` among the runs of `base` (ints where they parse)."""
    vals = set()
    for a, _ in entries(bench, base):
        if key in a:
            v = a[key]
            vals.add(int(v) if v.lstrip("-").isdigit() else v)
    return sorted(vals, key=lambda x: (isinstance(x, str), x))


@contextlib.contextmanager
def guard(rows, name):
    """Runs one target's computation: a Skip becomes a skipped row, a KeyError a failed one."""
    try:
        yield
    except Skip as e:
        rows.append(Target(name, None, 0, skipped=str(e)))
    except KeyError as e:
        rows.append(Target(f"{name}: missing figure {e}", None, 0))


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
        # The target modules guard each target (guard()); this catches what escapes one.
        try:
            rows.extend(mod.targets(bench, peers))
        except Skip as e:
            rows.append(Target(f"{s}: targets", None, 0, skipped=str(e)))
        except KeyError as e:
            rows.append(Target(f"{s}: missing figure {e}", None, 0))
    print("\nperformance targets (measured in this run):")
    width = max([len(r.name) for r in rows] + [10])
    for r in rows:
        meas = "n/a" if r.measured is None else f"{r.measured:.3f}{r.unit}"
        if r.skipped:
            print(f"  {r.name:{width}s}  {meas:>12s}  skip  ({r.skipped})")
            continue
        verdict = "pass" if r.passed() else "FAIL"
        note = f"  ({r.note})" if r.note else ""
        print(f"  {r.name:{width}s}  {meas:>12s}  target {r.op} {r.target:g}{r.unit}  {verdict}{note}")
    with open(os.path.join(outdir, "targets.json"), "w") as f:
        json.dump([dict(r.__dict__, passed=r.passed()) for r in rows], f, indent=1)
    passed = sum(r.passed() for r in rows)
    skipped = sum(bool(r.skipped) for r in rows)
    print(f"targets: {passed} passed, {len(rows) - passed - skipped} failed, {skipped} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
