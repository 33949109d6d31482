#!/bin/sh
# Peer comparison of the kernels suite: PyTorch's CPU optimizers on the same sizes and threads,
# timed side by side with heterograd's kernels in one process (through the benchmark-only C
# interface build/cpu-omp/bench/libhg-kernels-capi.so, built by ./hg bench).
#   bench/compare/kernels_peers.sh OUT.json [LIB.so] [--threads=LIST]
# Thread counts: --threads=LIST, else those of the suite's run recorded in the JSON next to OUT
# (out/bench/kernels.json), else 1, 2, 4, ... up to the cores (bench_threads.py).
# PyTorch comes from Debian's python3-torch (./hg bench installs it), which lives in the
# system Python's dist-packages, so run the system interpreter when there is one.
set -eu
out=${1:?usage: kernels_peers.sh OUT.json [LIB.so] [--threads=LIST]}
shift
here=$(cd "$(dirname "$0")" && pwd)
lib=$here/../../build/cpu-omp/bench/libhg-kernels-capi.so
case "${1:-}" in
  "" | --*) ;;
  *) lib=$1; shift ;;
esac
[ -f "$lib" ] || { echo "kernels_peers: $lib not built (cmake --build build/cpu-omp)" >&2; exit 1; }
. "$here/torch_python.sh" kernels_peers
exec "$py" "$here/torch_optim.py" "$out" "$lib" "$@"
