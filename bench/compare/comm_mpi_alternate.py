#!/usr/bin/env python3
"""Alternating runs of the comm suite's MPI peers, for figures robust to a shared machine.

    comm_mpi_alternate.py NP REPS SIZES PROG [PROG ...]

Runs each PROG once per repetition, in turn (so every program sees the same mix of load),
under `mpirun -np NP --oversubscribe`, with HG_COMM_SIZES=SIZES (comma-separated floats).
PROG is `raw` (raw MPI_Allreduce) or `hg[:k=v,...]`, heterograd's mpi transport with
`algo=<algorithm or blocking>` and environment knobs (HG_SEGMENT_BYTES=..., see
bench/compare/hg_mpi_allreduce.cpp). Prints, per size, the median over repetitions of each
program's median call, and its ratio to the first program. Needs the build's
hg-bench-comm-*-allreduce programs (build/cpu-omp/bench).
"""
import json
import os
import statistics
import subprocess
import sys


def main():
    np_, reps, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    progs = sys.argv[4:]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bindir = os.path.join(root, "build", "cpu-omp", "bench")
    env = dict(os.environ, HG_COMM_SIZES=sizes)
    flags = ["--oversubscribe"]
    if os.geteuid() == 0:
        flags.append("--allow-run-as-root")
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    res, loads = {}, []
    for _ in range(reps):
        for p in progs:
            name, _, extra = p.partition(":")
            e, args = dict(env), []
            if name == "raw":
                exe = os.path.join(bindir, "hg-bench-comm-raw-mpi-allreduce")
            else:
                exe = os.path.join(bindir, "hg-bench-comm-hg-mpi-allreduce")
                for kv in filter(None, extra.split(",")):
                    k, _, v = kv.partition("=")
                    if k == "algo":
                        args.append(v)
                    else:
                        e[k] = v
            loads.append(float(open("/proc/loadavg").read().split()[0]))
            out = subprocess.run(["mpirun", "-np", np_] + flags + [exe] + args, env=e,
                                 capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                if line.startswith("{"):
                    j = json.loads(line)
                    res.setdefault((p, j["floats"]), []).append(j["seconds"])
    print(f"np={np_} reps={reps} load average {min(loads):.2f}-{max(loads):.2f}")
    for m in (int(x) for x in sizes.split(",")):
        base = statistics.median(res[(progs[0], m)])
        line = f"{m:>9d}"
        for p in progs:
            med = statistics.median(res[(p, m)])
            line += f"  {p}: {med * 1e6:10.2f} us x{med / base:.3f}"
        print(line)


if __name__ == "__main__":
    main()
