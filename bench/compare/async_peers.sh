#!/bin/sh
# Peer figures of the async suite (bench/compare/async_mpi_roundtrip.cpp): the MPI runtime's
# push/pull round trip against a raw MPI ping-pong of the same payload (mpirun -np 2), and the
# MPI parameter server's update rate with 4 worker ranks against the bare update (-np 5).
# Usage: async_peers.sh OUT.json   (run by ./hg bench async after the build)
set -eu
out=${1:-out/bench/async-peers.json}
root=$(cd "$(dirname "$0")/../.." && pwd)
exe=$root/build/cpu-omp/bench/hg-bench-async-mpi-roundtrip
lines=$(mktemp)
notes=$(mktemp)
trap 'rm -f "$lines" "$notes"' EXIT

flags="--oversubscribe"
if [ "$(id -u)" -eq 0 ]; then
  flags="$flags --allow-run-as-root"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# One OpenMP thread per rank: two ranks already fill the two cores.
export OMP_NUM_THREADS=1
if command -v mpirun >/dev/null 2>&1 && [ -x "$exe" ]; then
  # shellcheck disable=SC2086
  mpirun -np 2 $flags "$exe" >>"$lines"
  # shellcheck disable=SC2086
  mpirun -np 5 $flags "$exe" server >>"$lines"
else
  echo "MPI round trip skipped: mpirun or $exe missing (needs the mpi component and heterograd/comm)" >>"$notes"
fi

mkdir -p "$(dirname "$out")"
python3 - "$lines" "$notes" "$out" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
notes = [l.strip() for l in open(sys.argv[2]) if l.strip()]
json.dump({"runs": runs, "notes": notes}, open(sys.argv[3], "w"), indent=1)
for r in runs:
    if "seconds" in r:
        print(f"  {r['name']:15s} {r['floats']:>9d} floats  {r['seconds']*1e6:12.2f} us per round trip")
    else:
        print(f"  {r['name']:15s} {r['floats']:>9d} floats  {r['workers']} workers  "
              f"{r['updates_per_second']:.0f} updates/s (bare update {r['bare_updates_per_second']:.0f}/s)")
for n in notes:
    print("  note:", n)
PY
