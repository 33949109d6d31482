#!/bin/sh
# Peer comparison of the models suite: PyTorch's step time for the same models (torch_mlp.py).
#   bench/compare/models_peers.sh OUT.json
set -eu
out=${1:?usage: models_peers.sh OUT.json}
here=$(cd "$(dirname "$0")" && pwd)
py=python3
for c in /usr/bin/python3 python3; do
  if "$c" -c 'import torch' >/dev/null 2>&1; then py=$c; break; fi
done
"$py" -c 'import torch' 2>/dev/null || {
  echo "models_peers: PyTorch is not importable (install python3-torch: ./hg bench does)" >&2
  exit 1
}
exec "$py" "$here/torch_mlp.py" "$out"
