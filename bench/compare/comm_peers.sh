#!/bin/sh
# Peers of the comm suite, measured like bench/comm_bench.cpp (every rank rewrites its buffer
# before each call; allreduce sum of 1K, 64K, 1M, 16M floats; 2 and 4 ranks on this machine):
#   raw_mpi   MPI_Allreduce in a small C++ program (bench/compare/raw_mpi_allreduce.cpp),
#             alone (run "raw_mpi": the peer of the inproc targets)
#   hg_mpi    heterograd's mpi transport, same harness (bench/compare/hg_mpi_allreduce.cpp),
#             interleaved call by call with MPI_Allreduce in one process (run
#             "raw_mpi+hg_mpi": this machine's speed changes from second to second, and
#             only calls made side by side compare like with like)
#   hg_mpi_blocking  its opt-in blocking mode (timeout = no_wait_limit: MPI_Allreduce, no
#             deadline), interleaved the same way (run "raw_mpi+hg_mpi_blocking"); context,
#             not the target
# Times: "seconds" is the median call (the slowest rank's time per call), "mean_seconds" the mean.
#   hg_mpi_pingpong  send/recv ping-pong between rank pairs over the mpi transport,
#             interleaved with the same over MPI_Send/MPI_Recv (raw_mpi_pingpong); context
#   gloo      torch.distributed over gloo (Debian python3-torch; context only, not a target)
# Usage: comm_peers.sh OUT.json   (run by ./hg bench comm after the build)
#   HG_BENCH_BIN  folder of the peer programs (default build/cpu-omp/bench; ./hg gpu-check
#                 passes its prebuilt ones)
#   HG_SKIP_GLOO  set to skip gloo (context only)
set -eu
out=${1:-out/bench/comm-peers.json}
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${HG_BENCH_BIN:-$root/build/cpu-omp/bench}
lines=$(mktemp)
notes=$(mktemp)
trap 'rm -f "$lines" "$notes"' EXIT

mpirun_flags="--oversubscribe"
if [ "$(id -u)" -eq 0 ]; then
  mpirun_flags="$mpirun_flags --allow-run-as-root"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

if command -v mpirun >/dev/null 2>&1 && [ -x "$bin/hg-bench-comm-raw-mpi-allreduce" ]; then
  for np in 2 4; do
    # shellcheck disable=SC2086
    mpirun -np $np $mpirun_flags "$bin/hg-bench-comm-raw-mpi-allreduce" >>"$lines"
    # shellcheck disable=SC2086
    mpirun -np $np $mpirun_flags "$bin/hg-bench-comm-hg-mpi-allreduce" raw automatic >>"$lines"
    # The opt-in blocking mode (no deadline), reported apart from the target.
    # shellcheck disable=SC2086
    mpirun -np $np $mpirun_flags "$bin/hg-bench-comm-hg-mpi-allreduce" raw blocking >>"$lines"
    # Point-to-point context: send/recv ping-pong between rank pairs, hg and raw interleaved.
    if [ -x "$bin/hg-bench-comm-hg-mpi-pingpong" ]; then
      # shellcheck disable=SC2086
      mpirun -np $np $mpirun_flags "$bin/hg-bench-comm-hg-mpi-pingpong" >>"$lines"
    fi
  done
else
  echo "MPI peers skipped: mpirun or the peer programs (built with the mpi component) missing" >>"$notes"
fi

# Debian's torch lives in the system python (a pyenv python on PATH would not see it).
py=/usr/bin/python3
[ -x "$py" ] || py=python3
if [ -n "${HG_SKIP_GLOO:-}" ]; then
  echo "gloo skipped (HG_SKIP_GLOO); context only" >>"$notes"
elif "$py" -c "import torch.distributed as d; assert d.is_gloo_available()" >/dev/null 2>&1; then
  for np in 2 4; do
    "$py" "$root/bench/compare/comm_gloo.py" "$np" $((29500 + np)) >>"$lines" 2>/dev/null ||
      echo "gloo with $np ranks failed" >>"$notes"
  done
else
  echo "gloo skipped: torch with gloo not importable by $py (install Debian python3-torch); context only" >>"$notes"
fi

mkdir -p "$(dirname "$out")"
python3 - "$lines" "$notes" "$out" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
notes = [l.strip() for l in open(sys.argv[2]) if l.strip()]
json.dump({"runs": runs, "notes": notes}, open(sys.argv[3], "w"), indent=1)
for r in runs:
    print(f"  {r['name']:16s} {'(in ' + r['run'] + ')' if r.get('run', r['name']) != r['name'] else '':34s}"
          f" {r['ranks']} ranks {r['floats']:>9d} floats  median {r['seconds']*1e6:12.2f} us"
          f"  mean {r.get('mean_seconds', r['seconds'])*1e6:12.2f} us")
for n in notes:
    print("  note:", n)
PY
