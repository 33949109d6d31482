#!/bin/sh
# The models suite's comparison with PyTorch's DDP over a link that costs something.
#
#   bench/compare/models_link.sh OUT.json [RATE_MBIT ...]        (default: 1000)
#
# On one machine every rank's traffic crosses the loopback interface, which moves data at
# memory speed: averaging less often (local SGD, H = 8) then buys nothing. This script shapes
# the loopback interface to RATE Mbit/s with a token bucket (tc's tbf qdisc; Linux routes
# traffic to the machine's own addresses through lo, so every local TCP connection shares the
# bucket), puts both peers' ranks on TCP (Gloo is TCP; OpenMPI is told pml ob1 and btl
# self,tcp, so its shared-memory transport does not bypass the link), and runs what
# models_peers.sh runs over 2 processes: PyTorch's DDP on Gloo (torch_ddp.py) and heterograd's
# local SGD at H = 1 and 8 (hg-bench-models-torch-mpi), LeNet-5 and ResNet-8. Each rate's
# figures go into OUT.json under "link_<RATE>mbit/ddp/<preset>" and
# "link_<RATE>mbit/hg_mpi/<preset>/<H>"; a line per figure is printed.
#
# Needs root (tc changes the whole machine's loopback: run it on a quiet machine). The qdisc
# is removed on exit, also on failure or interrupt; a loopback that already has a root qdisc
# other than the default is refused (it is not this script's to replace).
#   HG_BENCH_BIN  folder of the benchmark programs (default build/cpu-omp/bench; ./hg bench
#                 models builds hg-bench-models-torch-mpi)
set -eu
out=${1:?usage: models_link.sh OUT.json [RATE_MBIT ...]}
shift
[ $# -gt 0 ] || set -- 1000
here=$(cd "$(dirname "$0")" && pwd)
bin=${HG_BENCH_BIN:-$here/../../build/cpu-omp/bench}
. "$here/torch_python.sh" models_link
for r in "$@"; do
  case "$r" in
    ''|*[!0-9]*|0) echo "models_link: RATE_MBIT must be a positive integer, got '$r'" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "models_link: tc needs root" >&2; exit 1; }
command -v tc >/dev/null 2>&1 || { echo "models_link: no tc (Debian: iproute2)" >&2; exit 1; }
command -v mpirun >/dev/null 2>&1 || { echo "models_link: no mpirun" >&2; exit 1; }
[ -x "$bin/hg-bench-models-torch-mpi" ] || {
  echo "models_link: $bin/hg-bench-models-torch-mpi is missing (./hg bench models builds it)" >&2
  exit 1
}
case "$(tc qdisc show dev lo)" in
  *"qdisc noqueue 0: root"*|"") ;;
  *) echo "models_link: lo already has a root qdisc: $(tc qdisc show dev lo)" >&2; exit 1 ;;
esac

lines=$(mktemp)
shaped=0
cleanup() {
  if [ "$shaped" -eq 1 ]; then tc qdisc del dev lo root 2>/dev/null || true; fi
  rm -f "$lines" "$lines.ddp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi="--oversubscribe --allow-run-as-root --mca pml ob1 --mca btl self,tcp"
for rate in "$@"; do
  # The bucket holds two kernel timer ticks of the rate (rate / 250 Hz x 2 = RATE x 1000
  # bytes) and at least 256 KiB: loopback packets are up to 64 KiB (its MTU), and a bucket
  # smaller than a packet never lets it through. Packets wait up to 100 ms in the queue before
  # they are dropped (TCP then backs off, as on a real link).
  burst=$((rate * 1000))
  [ "$burst" -ge 262144 ] || burst=262144
  tc qdisc add dev lo root tbf rate "${rate}mbit" burst "$burst" latency 100ms
  shaped=1
  echo "models_link: lo shaped to $rate Mbit/s ($(tc qdisc show dev lo))"
  echo '{}' >"$lines.ddp"
  "$py" "$here/torch_ddp.py" "$lines.ddp"
  for preset in 0 1; do
    for h in 1 8; do
      # shellcheck disable=SC2086
      mpirun -np 2 $mpi "$bin/hg-bench-models-torch-mpi" "$preset" "$h" | sed "s/^{/{\"rate_mbit\": $rate, /" >>"$lines"
    done
  done
  "$py" - "$out" "$lines.ddp" "$rate" <<'PY'
import json, os, sys
out, ddp, rate = sys.argv[1], sys.argv[2], sys.argv[3]
res = json.load(open(out)) if os.path.exists(out) else {}
for k, v in json.load(open(ddp)).items():
    if k.startswith("ddp/"):
        res[f"link_{rate}mbit/{k}"] = v
with open(out, "w") as f:
    json.dump(res, f, indent=1)
PY
  tc qdisc del dev lo root
  shaped=0
done

"$py" - "$out" "$lines" <<'PY'
import json, os, sys
out, lines = sys.argv[1], sys.argv[2]
res = json.load(open(out)) if os.path.exists(out) else {}
for line in open(lines):
    line = line.strip()
    if line.startswith("{"):
        r = json.loads(line)
        res[f"link_{r['rate_mbit']}mbit/hg_mpi/{r['preset']}/{r['period']}"] = r
for key in sorted(res):
    if not key.startswith("link_"):
        continue
    r = res[key]
    print(f"{key}: {r['samples_per_second']:.0f} samples/s, accuracy {r['accuracy']:.4f} after {r['samples']} samples")
with open(out, "w") as f:
    json.dump(res, f, indent=1)
PY
