#!/usr/bin/env python3
"""Checks heterograd's layer rule on the include graph: nothing below includes anything above.

Usage: check_layers.py [--no-known-wrong] [INCLUDE_DIR]
  INCLUDE_DIR       default: the include/ folder next to cmake/
  --no-known-wrong  treat KNOWN_WRONG as empty (for trees other than heterograd's own)

Reads every header under INCLUDE_DIR/heterograd, places it in a layer, and prints one line per
`#include "heterograd/..."` that points to a higher layer:

    heterograd/kernels/launch.hpp:24: kernels -> sim (includes heterograd/sim/engine.hpp)

Exit status: 0 when the graph follows the rule, 1 when some include breaks it or some header
cannot be placed, 2 on bad usage. Standard library only, so it runs wherever CMake runs tests.

Where each header sits:
- heterograd/<layer>/... (detail/ included) is in <layer>. The folder runtime/ is placed even
  before it exists, so the first header written there is already checked.
- heterograd/testing/<layer>_archetypes.hpp is in <layer>: archetypes sit next to the layer
  whose concepts they model, so a layer's tests may use them and nothing below can.
- heterograd/<layer>.hpp, the layer's umbrella, is in <layer>; version.hpp is in core.
- heterograd/sparse.hpp, the umbrella of Parallax (row-sparse kernels, LSH layers, the sparse
  parameter server and hybrid aggregator), is in algorithms, where its highest part lives.
- heterograd/heterograd.hpp, the umbrella of everything host-compilable, is above all layers:
  no library header may include it.
- heterograd/sparse/ (row-sparse gradients and their kernels) is the layer just above kernels:
  it is built on kernels' launch and scratch, and everything that ships sparse gradients
  (compress, comm, algorithms) sits above it.

- heterograd/torch/ (the optional LibTorch component) sits above runtime: its modules may be
  driven by anything below; nothing below may need LibTorch.

Layers of one group (nn and data) may include each other.
"""

from __future__ import annotations

import pathlib
import re
import sys

# Lowest first. Each entry is one group; a header may include its own group and anything
# earlier in this list (DESIGN.md: "data flows upward; nothing below may include anything
# above").
LAYER_ORDER: list[tuple[str, ...]] = [
    ("core",),
    ("kernels",),
    ("sparse",),
    ("sim",),
    ("nn", "data"),
    ("optim",),
    ("comm",),
    ("compress",),
    ("balance",),
    ("algorithms",),
    ("runtime",),
    ("torch",),  # LibTorch's modules on flat buffers and the deep presets (optional component)
    ("c",),
    ("umbrella",),  # heterograd/heterograd.hpp only
]

RANK: dict[str, int] = {layer: i for i, group in enumerate(LAYER_ORDER) for layer in group}

# Top-level headers that are not named after their layer.
TOP_LEVEL = {
    "version.hpp": "core",
    "sparse.hpp": "algorithms",
    "heterograd.hpp": "umbrella",
}

# Arrows known to be wrong and not fixed yet, as (from-layer, to-layer) -> why. Each is still
# reported as a note; an entry that no longer matches any include is an error, so the list
# only shrinks.
KNOWN_WRONG: dict[tuple[str, str], str] = {}

# Forwarding headers: a public header that moved stays at its old path for one release,
# including nothing but its new path (and deprecated there: docs/architecture.md, "Public
# headers"). Its one include may point to any layer; anything else it includes is checked.
FORWARDING: dict[str, str] = {
    "heterograd/sim/runtime.hpp": "heterograd/runtime/sim.hpp",
    "heterograd/algorithms/async/remote.hpp": "heterograd/runtime/server.hpp",
    "heterograd/algorithms/async/threads.hpp": "heterograd/runtime/async_threads.hpp",
    "heterograd/algorithms/sync/threads.hpp": "heterograd/runtime/round_threads.hpp",
    "heterograd/algorithms/sync/mpi.hpp": "heterograd/runtime/round_mpi.hpp",
    "heterograd/algorithms/sync/drive.hpp": "heterograd/runtime/rounds.hpp",
    "heterograd/comm/sparse/hybrid.hpp": "heterograd/algorithms/sparse/hybrid.hpp",
    "heterograd/comm/sparse/parameter_server.hpp": "heterograd/algorithms/sparse/parameter_server.hpp",
    "heterograd/nn/gemm.hpp": "heterograd/kernels/gemm.hpp",
}

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](heterograd/[^>"]+)[>"]')


def layer_of(rel: str) -> str | None:
    """The layer of a header given by its path under include/ ('heterograd/...')."""
    parts = rel.split("/")
    if len(parts) < 2 or parts[0] != "heterograd":
        return None
    if len(parts) == 2:
        name = parts[1]
        if name in TOP_LEVEL:
            return TOP_LEVEL[name]
        stem = name.rsplit(".", 1)[0]
        return stem if stem in RANK and stem != "umbrella" else None
    folder = parts[1]
    if folder == "testing":
        stem = parts[-1].rsplit(".", 1)[0]
        # Longest layer name first, so a future 'runtime_...' never matches a shorter name.
        for layer in sorted(RANK, key=len, reverse=True):
            if layer != "umbrella" and stem.startswith(layer + "_"):
                return layer
        return None
    return folder if folder in RANK and folder != "umbrella" else None


def check(include_dir: pathlib.Path,
          known_wrong: dict[tuple[str, str], str] | None = None) -> tuple[list[str], list[str]]:
    """Returns (errors, notes) for the headers under include_dir/heterograd."""
    known = KNOWN_WRONG if known_wrong is None else known_wrong
    root = include_dir / "heterograd"
    if not root.is_dir():
        return [f"{root}: no such folder"], []
    errors: list[str] = []
    notes: list[str] = []
    used_known: set[tuple[str, str]] = set()
    headers = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in {".hpp", ".h", ".cuh"})
    for path in headers:
        rel = path.relative_to(include_dir).as_posix()
        src = layer_of(rel)
        if src is None:
            errors.append(f"{rel}: cannot place this header in a layer (see check_layers.py's "
                          "docstring: name testing/ headers <layer>_archetypes.hpp)")
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(1)
            dst = layer_of(target)
            where = f"{rel}:{lineno}"
            if dst is None:
                errors.append(f"{where}: includes {target}, which is in no layer")
            elif FORWARDING.get(rel) == target:
                continue
            elif RANK[dst] > RANK[src]:
                msg = f"{where}: {src} -> {dst} (includes {target})"
                if (src, dst) in known:
                    used_known.add((src, dst))
                    notes.append(f"{msg} [known: {known[(src, dst)]}]")
                else:
                    errors.append(msg)
    for arrow in sorted(set(known) - used_known):
        errors.append(f"KNOWN_WRONG lists {arrow[0]} -> {arrow[1]}, which no include has any more: "
                      "delete the entry")
    return errors, notes


def main(argv: list[str]) -> int:
    args = argv[1:]
    known = None
    if args and args[0] == "--no-known-wrong":
        known, args = {}, args[1:]
    if len(args) > 1 or (args and args[0].startswith("-")):
        print("\n".join(__doc__.splitlines()[2:5]), file=sys.stderr)
        return 2
    include_dir = (pathlib.Path(args[0]) if args
                   else pathlib.Path(__file__).resolve().parent.parent / "include")
    errors, notes = check(include_dir, known)
    for n in notes:
        print(f"note: {n}")
    for e in errors:
        print(e)
    order = " < ".join("{" + ", ".join(g) + "}" if len(g) > 1 else g[0] for g in LAYER_ORDER)
    if errors:
        print(f"{len(errors)} include(s) break the layer order {order}")
        return 1
    print(f"the include graph follows the layer order {order}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
