#!/usr/bin/env python3
"""Tests of check_under_test.py: the real headers against the real list pass; the real list
without one server policy's row, or one round method, fails naming it; a policy hidden in namespace detail, or derived
through another class, is found as it should be. Run by ctest as
under_test_checker_names_a_missing_policy; standard library only.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile
import unittest

HERE = pathlib.Path(__file__).resolve().parent
CHECKER = HERE / "check_under_test.py"
INCLUDE = HERE.parent / "include"
UNDER_TEST = HERE.parent / "tests/support/under_test.hpp"


def run_checker(include: pathlib.Path, under_test_text: str) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as tmp:
        listed = pathlib.Path(tmp) / "under_test.hpp"
        listed.write_text(under_test_text, encoding="utf-8")
        done = subprocess.run([sys.executable, str(CHECKER), str(include), str(listed)],
                              capture_output=True, text=True, check=False)
        return done.returncode, done.stdout + done.stderr


class check_under_test_test(unittest.TestCase):
    def test_the_real_list_names_every_real_policy(self) -> None:
        rc, out = run_checker(INCLUDE, UNDER_TEST.read_text())
        self.assertEqual(rc, 0, out)
        self.assertIn("ringleader_asgd", out)
        self.assertIn("eager_sgd", out)

    def test_a_list_without_a_row_fails_naming_the_policy(self) -> None:
        lines = UNDER_TEST.read_text().split("\n")
        kept = [l for l in lines if "async::ringleader_asgd(" not in l]
        self.assertEqual(len(kept), len(lines) - 1)
        rc, out = run_checker(INCLUDE, "\n".join(kept))
        self.assertEqual(rc, 1, out)
        self.assertIn("'ringleader_asgd'", out)
        self.assertNotIn("'ringmaster_asgd'", out)

    def test_the_walkthroughs_row_must_be_a_row_of_the_list(self) -> None:
        extending = (HERE.parent / "docs/extending.md").read_text()
        self.assertIn("{.batch = 3}", extending)
        with tempfile.TemporaryDirectory() as tmp:
            doc = pathlib.Path(tmp) / "extending.md"
            doc.write_text(extending.replace("{.batch = 3}", "{.batch = 4}"), encoding="utf-8")
            done = subprocess.run([sys.executable, str(CHECKER), str(INCLUDE), str(UNDER_TEST), str(doc)],
                                  capture_output=True, text=True, check=False)
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertIn("is not a row of the list", done.stdout)
        self.assertIn("{.batch = 4}", done.stdout)

    def test_a_list_without_a_round_method_fails_naming_it(self) -> None:
        text = UNDER_TEST.read_text()
        self.assertIn("sync::selsync<", text)
        rc, out = run_checker(INCLUDE, text.replace("sync::selsync<", "sync::bsp<"))
        self.assertEqual(rc, 1, out)
        self.assertIn("round method 'selsync'", out)

    def test_detail_classes_are_building_blocks_and_derived_policies_count(self) -> None:
        header = ("namespace detail {\n"
                  "template <class T> class policy_base {};\n"
                  "template <class T> class weighted : public policy_base<T> {};\n"
                  "}  // namespace detail\n"
                  "template <class T> class plain : public detail::weighted<T> {};\n"
                  "template <class T>\nclass direct final\n    : public detail::policy_base<T> {};\n"
                  "class unrelated : public std::vector<int> {};\n")
        sync = "namespace detail {\nclass replicated {};\n}  // namespace detail\nclass r : public detail::replicated {};\n"
        with tempfile.TemporaryDirectory() as tmp:
            folder = pathlib.Path(tmp) / "heterograd/algorithms"
            (folder / "async").mkdir(parents=True)
            (folder / "sync").mkdir()
            (folder / "async/p.hpp").write_text(header, encoding="utf-8")
            (folder / "sync/r.hpp").write_text(sync, encoding="utf-8")
            rc, out = run_checker(pathlib.Path(tmp), "async::plain(n, s)\nsync::r<T>\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("'direct'", out)
        for absent in ("'plain'", "'weighted'", "'unrelated'", "'policy_base'"):
            self.assertNotIn(absent, out)

    def test_headers_without_policies_fail_rather_than_pass_vacuously(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            rc, out = run_checker(pathlib.Path(tmp), "")
        self.assertEqual(rc, 1, out)
        self.assertIn("no class deriving from policy_base", out)
        self.assertIn("no class deriving from replicated", out)

if __name__ == "__main__":
    unittest.main()
