#!/bin/sh
# Peer comparison of the models suite: PyTorch's step time for the same MLPs (torch_mlp.py), and
# PyTorch's DistributedDataParallel on Gloo for the LibTorch presets (torch_ddp.py), merged into
# one JSON.
#   bench/compare/models_peers.sh OUT.json [--threads=LIST]
# Thread counts (the MLPs): --threads=LIST, else those of the suite's run recorded in the JSON
# next to OUT (out/bench/models.json), else 1, 2, 4, ... up to the cores (bench_threads.py).
set -eu
out=${1:?usage: models_peers.sh OUT.json [--threads=LIST]}
shift
here=$(cd "$(dirname "$0")" && pwd)
. "$here/torch_python.sh" models_peers
"$py" "$here/torch_mlp.py" "$out" "$@"
"$py" "$here/torch_ddp.py" "$out"
