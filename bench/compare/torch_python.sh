# Sourced by the peer scripts: sets $py to a Python interpreter that imports torch. Debian's
# python3-torch lives in the system Python's dist-packages, which a pyenv python3 on PATH
# does not see, so the system interpreter is tried first. $1 names the caller in the error.
py=
for c in /usr/bin/python3 python3; do
  if "$c" -c 'import torch' >/dev/null 2>&1; then py=$c; break; fi
done
[ -n "$py" ] || {
  echo "${1:-peers}: PyTorch is not importable (install python3-torch: ./hg bench does)" >&2
  exit 1
}
