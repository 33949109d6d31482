#!/bin/sh
# Peer comparison of the models suite, merged into one JSON:
#   - PyTorch's step time for the same MLPs (torch_mlp.py);
#   - PyTorch's DistributedDataParallel on Gloo, 2 processes, for the LibTorch presets
#     (torch_ddp.py: "ddp/<preset>");
#   - heterograd's local SGD on the presets over 2 MPI ranks, H = 1 and 8, timed the same way
#     (hg-bench-models-torch-mpi under mpirun: "hg_mpi/<preset>/<H>"; skipped without mpirun or
#     the program, which needs the torch and mpi components).
#   bench/compare/models_peers.sh OUT.json [--threads=LIST]
# Thread counts (the MLPs): --threads=LIST, else those of the suite's run recorded in the JSON
# next to OUT (out/bench/models.json), else 1, 2, 4, ... up to the cores (bench_threads.py).
#   HG_BENCH_BIN  folder of the benchmark programs (default build/cpu-omp/bench)
set -eu
out=${1:?usage: models_peers.sh OUT.json [--threads=LIST]}
shift
here=$(cd "$(dirname "$0")" && pwd)
bin=${HG_BENCH_BIN:-$here/../../build/cpu-omp/bench}
. "$here/torch_python.sh" models_peers
"$py" "$here/torch_mlp.py" "$out" "$@"
"$py" "$here/torch_ddp.py" "$out"
if command -v mpirun >/dev/null 2>&1 && [ -x "$bin/hg-bench-models-torch-mpi" ]; then
  flags="--oversubscribe"
  if [ "$(id -u)" -eq 0 ]; then
    flags="$flags --allow-run-as-root"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  lines=$(mktemp)
  trap 'rm -f "$lines"' EXIT
  for preset in 0 1; do
    for h in 1 8; do
      # shellcheck disable=SC2086
      mpirun -np 2 $flags "$bin/hg-bench-models-torch-mpi" "$preset" "$h" >>"$lines"
    done
  done
  "$py" - "$out" "$lines" <<'PY'
import json, sys
out, lines = sys.argv[1], sys.argv[2]
with open(out) as f:
    res = json.load(f)
for line in open(lines):
    line = line.strip()
    if line.startswith("{"):
        r = json.loads(line)
        res[f"hg_mpi/{r['preset']}/{r['period']}"] = r
        print(f"heterograd local SGD over MPI {r['preset']} H={r['period']}: {r['samples_per_second']:.0f} samples/s, "
              f"accuracy {r['accuracy']:.4f} after {r['samples']} samples")
with open(out, "w") as f:
    json.dump(res, f, indent=1)
PY
else
  echo "models_peers: heterograd's MPI figures skipped (no mpirun or $bin/hg-bench-models-torch-mpi)" >&2
fi
