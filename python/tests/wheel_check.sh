#!/bin/sh
# pip wheel . builds a wheel holding the extension, its type stubs and the package; installed
# into a fresh virtual environment (with the system's site packages: Debian's python3-torch), it
# imports and steps an optimizer outside the source tree.
#   wheel_check.sh PYTHON SOURCE_DIR WORK_DIR
# PYTHON has scikit-build-core and nanobind (./hg deps puts them in .venv): the build runs
# without isolation, so it needs no network; pyproject.toml pins the same versions for an
# isolated `pip wheel .`.
set -eu
py=$1
src=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
"$py" -m pip wheel --no-deps --no-build-isolation -q -w "$work/dist" "$src"
whl=$(ls "$work"/dist/heterograd-*.whl)
listing=$("$py" -m zipfile -l "$whl")
for f in heterograd/__init__.py heterograd/optim.py heterograd/_core.pyi heterograd/py.typed \
         "heterograd/_core.cpython-"; do
  printf '%s\n' "$listing" | grep -q "$f" || { echo "wheel_check: $f missing from $whl" >&2; exit 1; }
done
"$py" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install --no-deps -q "$whl"
cd "$work"
"$work/venv/bin/python" - <<'PY'
import torch
import heterograd, heterograd.optim as hgo
assert "site-packages" in heterograd.__file__, heterograd.__file__
p = torch.nn.Parameter(torch.ones(4))
p.grad = torch.ones(4)
hgo.SGD([p], lr=0.5).step()
assert torch.equal(p.detach(), torch.full((4,), 0.5))
print("wheel_check: heterograd", heterograd.__version__, "from", heterograd.__file__, "steps")
PY
