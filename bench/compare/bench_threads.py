"""The thread counts a peer comparison measures: the same as its suite's run.

    threads(argv, out_path) -> [1, 2, ...]

In order: `--threads=LIST` in argv (removed from it; the rule of bench/bench_args.hpp:
comma-separated integers 1 .. 1024, each once; anything else exits with status 2), else the
thread counts the suite recorded in its JSON next to OUT (out/bench/kernels-peers.json ->
out/bench/kernels.json, context "hg_bench_threads", which ./hg bench writes just before), else
bench_args.hpp's default: 1, 2, 4, ... up to the machine's cores.
"""
import json
import os
import sys

MAX_THREADS = 1024


def default_threads():
    n = os.cpu_count() or 1
    out, t = [], 1
    while t < n:
        out.append(t)
        t *= 2
    return out + [n]


def parse(value):
    rule = (f"--threads takes a comma-separated list of integers from 1 to {MAX_THREADS}, each once")
    out = []
    for item in value.split(","):
        bad = None
        if not item:
            bad = "an empty element" if value else "an empty list"
        elif not (item.isascii() and item.isdigit()):
            bad = f"'{item}' is a negative number" if item.startswith("-") else f"'{item}' is not a number"
        elif int(item) == 0:
            bad = f"'{item}' is zero (the smallest value is 1)"
        elif int(item) > MAX_THREADS:
            bad = f"'{item}' is too large (the largest value is {MAX_THREADS})"
        elif int(item) in out:
            bad = f"'{item}' appears twice"
        if bad:
            sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: --threads={value}: {bad}; {rule}\n")
            sys.exit(2)
        out.append(int(item))
    return out


def from_suite(out_path):
    base = os.path.basename(out_path)
    if not base.endswith("-peers.json"):
        return None
    path = os.path.join(os.path.dirname(out_path), base[:-len("-peers.json")] + ".json")
    try:
        with open(path) as f:
            value = json.load(f).get("context", {}).get("hg_bench_threads")
    except (OSError, ValueError):
        return None
    return parse(value) if value else None


def threads(argv, out_path):
    for a in list(argv):
        if a == "--threads" or a.startswith("--threads="):
            argv.remove(a)
            return parse(a.partition("=")[2])
    return from_suite(out_path) or default_threads()
