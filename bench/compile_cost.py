#!/usr/bin/env python3
"""What including a heterograd header costs the compiler: user CPU seconds and peak memory.

Compiles `#include <HEADER>` + an empty main for each layer's umbrella header and for
heterograd/heterograd.hpp, with the flags of the cpu-omp preset (g++ -std=c++20 -O2, OpenMP,
Thrust's OpenMP device system over the CCCL headers), and prints a Markdown table.

    bench/compile_cost.py [--repeat N] [--cccl DIR] [--cxx g++] [--include DIR]
                          [--define HG_HAS_MPI=1 ...] [HEADER ...]

User CPU time (not wall time, which this shared machine makes noisy) and the peak resident
memory come from wait4() of the compiler driver, which folds in cc1plus. With --repeat N the
smallest user time of N runs is kept (interference only ever adds time). The CCCL folder
comes from --cccl, else HG_CCCL_INCLUDE_DIR in build/cpu-omp/CMakeCache.txt, else
/usr/local/cuda/include/cccl. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent

DEFAULT_HEADERS = [
    "heterograd/core.hpp",
    "heterograd/kernels.hpp",
    "heterograd/sim.hpp",
    "heterograd/nn.hpp",
    "heterograd/data.hpp",
    "heterograd/optim.hpp",
    "heterograd/compress.hpp",
    "heterograd/comm.hpp",
    "heterograd/balance.hpp",
    "heterograd/algorithms/async.hpp",
    "heterograd/algorithms/sync.hpp",
    "heterograd/algorithms/decoupled.hpp",
    "heterograd/sparse.hpp",
    "heterograd/heterograd.hpp",
]


def cccl_dir(explicit: str | None) -> str:
    if explicit:
        return explicit
    cache = ROOT / "build" / "cpu-omp" / "CMakeCache.txt"
    if cache.is_file():
        m = re.search(r"^HG_CCCL_INCLUDE_DIR:PATH=(.*)$", cache.read_text(), re.MULTILINE)
        if m and m.group(1):
            return m.group(1)
    return "/usr/local/cuda/include/cccl"


def measure(cmd: list[str]) -> tuple[float, float]:
    """(user seconds, peak MB) of one compile; raises if the compile fails."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = proc.stderr.read() if proc.stderr else b""
    # wait4's usage covers the driver and the children it waited for (cc1plus, as); on Linux
    # its ru_maxrss is the largest of them, in KiB.
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{stderr.decode(errors='replace')}")
    return usage.ru_utime, usage.ru_maxrss / 1024.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("headers", nargs="*", default=DEFAULT_HEADERS)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--cccl", default=None)
    ap.add_argument("--cxx", default="g++")
    ap.add_argument("--include", default=str(ROOT / "include"),
                    help="the folder holding heterograd/ (default: this checkout's include/)")
    ap.add_argument("--define", action="append", default=[],
                    help="extra -D definitions, e.g. HG_HAS_MPI=1 (needs MPI's include path)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error(f"--repeat {args.repeat}: must be at least 1")

    base = [args.cxx, "-std=c++20", "-O2", "-fopenmp", "-fno-math-errno",
            "-DHG_HAS_OPENMP=1",
            "-DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_OMP",
            "-DTHRUST_HOST_SYSTEM=THRUST_HOST_SYSTEM_CPP"]
    base += [f"-D{d}" for d in args.define]
    dirs = ["-I", args.include, "-isystem", cccl_dir(args.cccl)]

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp) / "main.cpp"
        for header in args.headers:
            src.write_text(f"#include <{header}>\nint main() {{ return 0; }}\n")
            cmd = base + dirs + ["-c", str(src), "-o", os.devnull]
            runs = [measure(cmd) for _ in range(args.repeat)]
            user = min(r[0] for r in runs)
            mem = max(r[1] for r in runs)
            rows.append((header, user, mem))
            print(f"{header}: {user:.2f} s, {mem:.0f} MB", file=sys.stderr, flush=True)

    shown = " ".join(base + ["-I include -isystem <cccl> -c main.cpp"])
    print(f"`{shown}`, main.cpp = `#include <HEADER>` + an empty main; user CPU seconds "
          f"(least of {args.repeat}), peak resident MB\n")
    print("| header | user s | peak MB |")
    print("|---|---:|---:|")
    for header, user, mem in rows:
        print(f"| `{header}` | {user:.2f} | {mem:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
