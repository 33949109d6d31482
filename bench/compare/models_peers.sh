#!/bin/sh
# Peer comparison of the models suite: PyTorch's step time for the same models (torch_mlp.py).
#   bench/compare/models_peers.sh OUT.json
set -eu
out=${1:?usage: models_peers.sh OUT.json}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/torch_python.sh" models_peers
exec "$py" "$here/torch_mlp.py" "$out"
