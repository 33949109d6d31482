#!/usr/bin/env python3
"""Checks that every algorithm of the library is under test (issue 44), per family:
  - a server policy: each public class of include/heterograd/algorithms/async/*.hpp that
    derives, directly or through another class, from detail::policy_base has a row in
    tests/support/under_test.hpp (`async::<name>(`);
  - a round method: each public class of include/heterograd/algorithms/sync/*.hpp deriving
    from detail::replicated is an entry there (`sync::<name><`).
under_test.hpp holds the lists that the property tests iterate. Fails naming each missing one,
and fails if a `policy_row{` example of docs/extending.md is not, whitespace aside, a row of
under_test.hpp (so the walkthrough's example is the code).

Usage: check_under_test.py [INCLUDE_DIR UNDER_TEST_HPP [EXTENDING_MD]]
       (default: include/, tests/support/under_test.hpp and docs/extending.md next to cmake/)

A class inside `namespace detail { ... }` (closed by `}  // namespace detail`, the house
style) is a building block, not a policy: weighted_asgd is the base of asgd and its
weighted variants. Standard library only.
"""

from __future__ import annotations

import pathlib
import re
import sys

# (family, folder under INCLUDE_DIR, the base every member derives from, how a row names it)
FAMILIES = [
    ("server policy", "heterograd/algorithms/async", "policy_base", "async::{}\\s*[(<]"),
    ("round method", "heterograd/algorithms/sync", "replicated", "sync::{}\\s*<"),
]
CLASS = re.compile(r"^\s*class\s+(\w+)\s*(?:final\s*)?:\s*((?:public|protected|private)[^{]*)",
                   re.MULTILINE)
BASE = re.compile(r"(?:public|protected|private)\s+(?:[\w:]*::)?(\w+)\s*<")
DETAIL = re.compile(r"^namespace detail \{$(.*?)^\}  // namespace detail$", re.MULTILINE | re.DOTALL)


def classes(text: str) -> list[tuple[str, list[str], bool]]:
    """(name, base names, in detail) of each class with bases in a header."""
    detail_spans = [m.span() for m in DETAIL.finditer(text)]
    out = []
    for m in CLASS.finditer(text):
        bases = BASE.findall(m.group(2))
        in_detail = any(a <= m.start() < b for a, b in detail_spans)
        out.append((m.group(1), bases, in_detail))
    return out


def members(folder: pathlib.Path, root: str) -> list[str]:
    """The public classes of folder/*.hpp that derive from root, directly or not."""
    found = []
    for header in sorted(folder.glob("*.hpp")):
        found += classes(header.read_text())
    derived = {root}
    grew = True
    while grew:
        grew = False
        for name, bases, _ in found:
            if name not in derived and any(b in derived for b in bases):
                derived.add(name)
                grew = True
    return sorted({name for name, _, in_detail in found if name in derived and not in_detail})


def missing_rows(family: str, folder: pathlib.Path, root: str, row: str, listed: str,
                 under_test: pathlib.Path) -> list[str]:
    """One message per member of a family without its row; one if the family is empty."""
    found = members(folder, root)
    if not found:
        return [f"check_under_test: no class deriving from {root} in {folder}: "
                "the pattern no longer matches the headers"]
    missing = [m for m in found if not re.search(row.format(m), listed)]
    if not missing:
        print(f"check_under_test: {len(found)} of family {family}, each listed: {', '.join(found)}")
    return [f"check_under_test: {family} '{m}' ({folder}) is not listed in {under_test}: "
            "add it to its family's list (see docs/extending.md)" for m in missing]


def stale_examples(extending: pathlib.Path, listed: str) -> list[str]:
    """One message per policy_row example of the walkthrough that is not in the list."""
    flat = re.sub(r"\s+", "", listed)
    blocks = re.findall(r"```cpp\n(policy_row\{.*?)```", extending.read_text(), re.DOTALL)
    return [f"check_under_test: the example in {extending} is not a row of the list: {b.strip()}"
            for b in blocks if re.sub(r"\s+", "", b) not in flat]


def main(argv: list[str]) -> int:
    here = pathlib.Path(__file__).resolve().parent.parent
    include = pathlib.Path(argv[1]) if len(argv) > 1 else here / "include"
    under_test = pathlib.Path(argv[2]) if len(argv) > 2 else here / "tests/support/under_test.hpp"
    listed = under_test.read_text()
    extending = pathlib.Path(argv[3]) if len(argv) > 3 else here / "docs/extending.md"
    errors = stale_examples(extending, listed) if extending.exists() else []
    for family, folder, root, row in FAMILIES:
        errors += missing_rows(family, include / folder, root, row, listed, under_test)
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
