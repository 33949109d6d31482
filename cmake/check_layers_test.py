#!/usr/bin/env python3
"""Tests of check_layers.py on tiny include trees written to a temporary folder.

Run by ctest as layer_checker_reports_a_wrong_arrow; standard library only.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile
import unittest

CHECKER = pathlib.Path(__file__).resolve().parent / "check_layers.py"


def run_checker(files: dict[str, str]) -> tuple[int, str]:
    """Writes files (path under include/ -> text) and runs the checker on that tree."""
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp) / "include"
        for rel, text in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        done = subprocess.run([sys.executable, str(CHECKER), "--no-known-wrong", str(root)], capture_output=True,
                              text=True, check=False)
        return done.returncode, done.stdout + done.stderr


def header(*includes: str) -> str:
    return "#pragma once\n" + "".join(f'#include "{i}"\n' for i in includes)


# A legal tree: each header includes only its own layer and layers below.
LEGAL = {
    "heterograd/core/span.hpp": header(),
    "heterograd/kernels/launch.hpp": header("heterograd/core/span.hpp"),
    "heterograd/sim/engine.hpp": header("heterograd/core/span.hpp"),
    "heterograd/algorithms/async/asgd.hpp": header("heterograd/sim/engine.hpp"),
    "heterograd/runtime/sim.hpp": header("heterograd/algorithms/async/asgd.hpp"),
    "heterograd/c/detail/implementation.hpp": header("heterograd/runtime/sim.hpp"),
    "heterograd/testing/core_archetypes.hpp": header("heterograd/core/span.hpp"),
    "heterograd/core.hpp": header("heterograd/core/span.hpp"),
    "heterograd/heterograd.hpp": header("heterograd/core.hpp", "heterograd/runtime/sim.hpp"),
}


class check_layers_test(unittest.TestCase):
    def test_a_tree_that_follows_the_order_passes(self) -> None:
        rc, out = run_checker(LEGAL)
        self.assertEqual(rc, 0, out)
        self.assertIn("follows the layer order", out)

    def test_one_include_from_below_is_reported_with_its_file_line_and_layers(self) -> None:
        tree = dict(LEGAL)
        tree["heterograd/kernels/launch.hpp"] = header("heterograd/core/span.hpp",
                                                       "heterograd/sim/engine.hpp")
        rc, out = run_checker(tree)
        self.assertEqual(rc, 1, out)
        self.assertIn("heterograd/kernels/launch.hpp:3: kernels -> sim "
                      "(includes heterograd/sim/engine.hpp)", out)
        self.assertIn("1 include(s) break", out)

    def test_runtime_sits_above_algorithms_and_below_c(self) -> None:
        tree = dict(LEGAL)
        tree["heterograd/algorithms/async/asgd.hpp"] = header("heterograd/runtime/sim.hpp")
        tree["heterograd/runtime/sim.hpp"] = header("heterograd/c/detail/implementation.hpp")
        rc, out = run_checker(tree)
        self.assertEqual(rc, 1, out)
        self.assertIn("heterograd/algorithms/async/asgd.hpp:2: algorithms -> runtime", out)
        self.assertIn("heterograd/runtime/sim.hpp:2: runtime -> c", out)

    def test_an_archetype_sits_in_the_layer_it_names(self) -> None:
        tree = dict(LEGAL)
        tree["heterograd/kernels/launch.hpp"] = header("heterograd/testing/core_archetypes.hpp")
        tree["heterograd/core/span.hpp"] = header("heterograd/testing/core_archetypes.hpp")
        tree["heterograd/testing/core_archetypes.hpp"] = header("heterograd/kernels/launch.hpp")
        rc, out = run_checker(tree)
        self.assertEqual(rc, 1, out)
        self.assertIn("heterograd/testing/core_archetypes.hpp:2: core -> kernels", out)
        self.assertIn("1 include(s) break", out)

    def test_no_library_header_includes_the_umbrella(self) -> None:
        tree = dict(LEGAL)
        tree["heterograd/c/detail/implementation.hpp"] = header("heterograd/heterograd.hpp")
        rc, out = run_checker(tree)
        self.assertEqual(rc, 1, out)
        self.assertIn("c -> umbrella", out)

    def test_a_header_in_no_layer_is_an_error(self) -> None:
        tree = dict(LEGAL)
        tree["heterograd/testing/helpers.hpp"] = header()
        tree["heterograd/widgets/thing.hpp"] = header()
        rc, out = run_checker(tree)
        self.assertEqual(rc, 1, out)
        self.assertIn("heterograd/testing/helpers.hpp: cannot place", out)
        self.assertIn("heterograd/widgets/thing.hpp: cannot place", out)

    def test_a_known_wrong_arrow_is_a_note_and_a_stale_one_an_error(self) -> None:
        sys.path.insert(0, str(CHECKER.parent))
        import check_layers  # pylint: disable=import-outside-toplevel
        known = {("kernels", "sim"): "why"}
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            for rel, text in LEGAL.items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text(text, encoding="utf-8")
            errors, notes = check_layers.check(root, known)
            self.assertEqual(notes, [])
            self.assertEqual(len(errors), 1)
            self.assertIn("KNOWN_WRONG lists kernels -> sim", errors[0])
            (root / "heterograd/kernels/launch.hpp").write_text(
                header("heterograd/sim/engine.hpp"), encoding="utf-8")
            errors, notes = check_layers.check(root, known)
            self.assertEqual(errors, [])
            self.assertEqual(len(notes), 1)
            self.assertIn("heterograd/kernels/launch.hpp:2: kernels -> sim", notes[0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
