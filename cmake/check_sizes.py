#!/usr/bin/env python3
"""Checks the driver's sizes (issue 44): no function over MAX_FUNCTION lines, no file over
MAX_FILE lines, `HG_HAS_MPI` in no more files than listed, in tools/driver/.

Usage: check_sizes.py [DRIVER_DIR]   (default: tools/driver next to cmake/)

A function is a definition at namespace or class level (up to two spaces of indentation, the
house style) whose body opens within eight lines of its name; its length runs from its first
line to its closing brace. Lambdas and local classes count with the function they are in.

KNOWN lists what is over a limit today, with its size: it may only shrink. A listed item that
grew fails; one that is now within the limit, or gone, fails too until it is deleted here, so
the list never hides a new offender. Standard library only.
"""

from __future__ import annotations

import pathlib
import re
import sys

MAX_FUNCTION = 80
MAX_FILE = 600

# (file, function name) -> lines today; file -> lines today.
KNOWN_FUNCTIONS: dict[tuple[str, str], int] = {
    ("algorithms.hpp", "builtin_algorithms"): 167,  # the table of rows (data)
}
KNOWN_FILES: dict[str, int] = {
}
# The one file with HG_HAS_MPI (the driver's door to MPI).
KNOWN_MPI_FILES = {"mpi_world.hpp"}

START = re.compile(r"^( {0,2})(?!(if|for|while|switch|return|else|case|do)\b)[A-Za-z_~].*\(")
NAME = re.compile(r"([A-Za-z_~][A-Za-z_0-9:~]*)\s*\(")


def functions(text: str) -> list[tuple[str, int, int]]:
    """(name, first line, length) of each function definition in a source file."""
    lines = text.split("\n")
    out: list[tuple[str, int, int]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not START.match(line) or line.rstrip().endswith(";") or line.lstrip().startswith(("//", "#")):
            i += 1
            continue
        j = i
        while j < len(lines) and j - i < 8 and "{" not in lines[j] and not lines[j].rstrip().endswith(";"):
            j += 1
        if j >= len(lines) or "{" not in lines[j] or lines[j].rstrip().endswith(";"):
            i += 1
            continue
        depth, k, started = 0, j, False
        while k < len(lines):
            for ch in lines[k]:
                if ch == "{":
                    depth += 1
                    started = True
                elif ch == "}":
                    depth -= 1
            if started and depth <= 0:
                break
            k += 1
        m = NAME.search(line)
        out.append((m.group(1).split("::")[-1] if m else "?", i + 1, k - i + 1))
        i = k + 1
    return out


def check(root: pathlib.Path) -> list[str]:
    errors: list[str] = []
    seen_functions: set[tuple[str, str]] = set()
    seen_files: set[str] = set()
    mpi_files: set[str] = set()
    for path in sorted(p for p in root.iterdir() if p.suffix in {".cpp", ".hpp"}):
        text = path.read_text(encoding="utf-8")
        n = text.count("\n")
        if "HG_HAS_MPI" in text:
            mpi_files.add(path.name)
        if n > MAX_FILE:
            known = KNOWN_FILES.get(path.name)
            seen_files.add(path.name)
            if known is None or n > known:
                errors.append(f"{path.name}: {n} lines (at most {MAX_FILE}" +
                              (f"; listed at {known}" if known else "") + ")")
        for name, first, length in functions(text):
            if length <= MAX_FUNCTION:
                continue
            key = (path.name, name)
            known = KNOWN_FUNCTIONS.get(key)
            seen_functions.add(key)
            if known is None or length > known:
                errors.append(f"{path.name}:{first}: {name} has {length} lines (at most {MAX_FUNCTION}" +
                              (f"; listed at {known}" if known else "") + ")")
    for key in sorted(set(KNOWN_FUNCTIONS) - seen_functions):
        errors.append(f"KNOWN_FUNCTIONS lists {key[0]}:{key[1]}, which is within {MAX_FUNCTION} lines or gone: "
                      "delete the entry")
    for name in sorted(set(KNOWN_FILES) - seen_files):
        errors.append(f"KNOWN_FILES lists {name}, which is within {MAX_FILE} lines or gone: delete the entry")
    for name in sorted(mpi_files - KNOWN_MPI_FILES):
        errors.append(f"{name}: a new file with HG_HAS_MPI (the driver's MPI code belongs in the listed files)")
    for name in sorted(KNOWN_MPI_FILES - mpi_files):
        errors.append(f"KNOWN_MPI_FILES lists {name}, which has no HG_HAS_MPI any more: delete the entry")
    return errors


def main(argv: list[str]) -> int:
    root = pathlib.Path(argv[1]) if len(argv) > 1 else pathlib.Path(__file__).resolve().parent.parent / "tools" / "driver"
    if not root.is_dir():
        print(f"check_sizes.py: {root}: no such folder", file=sys.stderr)
        return 2
    errors = check(root)
    for e in errors:
        print(e)
    if not errors:
        print(f"tools/driver: functions <= {MAX_FUNCTION} lines and files <= {MAX_FILE} but for the listed ones")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
