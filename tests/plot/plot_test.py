#!/usr/bin/env python3
"""Tests of tools/plot/heterograd_plot.py, on small synthetic run folders (no build needed).

    python3 tests/plot/plot_test.py [-v]

Needs numpy and matplotlib; when the python3 running this lacks them (a pyenv python,
say) and /usr/bin/python3 has them, the tests re-run themselves under /usr/bin/python3.
HETEROGRAD_PLOT=path tests another copy of the script.  The checks read charts.json, the
script's description of what it drew, rather than pixels.
"""
import contextlib
import importlib.util
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(os.environ.get("HETEROGRAD_PLOT", REPO / "tools" / "plot" / "heterograd_plot.py"))
T_975_2 = 4.302652729911275          # Student t, 0.975 quantile, 2 degrees of freedom
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
HAVE_LIBS = importlib.util.find_spec("numpy") is not None and importlib.util.find_spec("matplotlib") is not None
_module = None


def plot_module():
    """The script, imported once (running main() in-process is much faster than a process each)."""
    global _module
    if _module is None:
        spec = importlib.util.spec_from_file_location("heterograd_plot_under_test", SCRIPT)
        _module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_module)
    return _module


# ----------------------------------------------------------------------------- fixtures
def csv_text(header, rows):
    lines = ["# heterograd simulator run", "# seed=1", ",".join(header)]
    lines += [",".join(str(v) for v in r) for r in rows]
    return "\n".join(lines) + "\n"


def evaluations(times, method=0, seed=1, accuracy=None):
    """A grad_norm_sq / loss / accuracy curve that differs by method and seed."""
    rows = []
    for k, t in enumerate(times):
        g = 10.0 * math.exp(-(method + 1) * t / 50.0) * (1 + 0.05 * seed)
        acc = accuracy[k] if accuracy is not None else 0.1 + 0.8 * (1 - math.exp(-t / 30.0))
        rows.append([t, 1.0 + g, acc, g, t / 10.0, 32 * k, k])
    return csv_text(["time", "loss", "accuracy", "grad_norm_sq", "epochs", "samples", "updates"], rows)


WORKER_HEADER = ["worker", "jobs_started", "jobs_finished", "jobs_cancelled", "busy", "idle", "waiting",
                 "wasted", "throughput", "applied", "buffered", "discarded", "interrupted", "model_time",
                 "speed_rank"]


def workers(model_times, busy):
    ranks = sorted(range(len(model_times)), key=lambda w: model_times[w])
    rows = [[w, 10, 10, 0, busy[w], 100.0 - busy[w], 0.0, 0, 0.1, 10, 0, 0, 0, model_times[w], ranks.index(w)]
            for w in range(len(model_times))]
    return csv_text(WORKER_HEADER, rows)


def staleness(applied):
    return csv_text(["staleness", "applied", "buffered", "discarded", "interrupted"],
                    [[s, a, 0, 0, 0] for s, a in enumerate(applied)])


TIMES = [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
MODEL_TIMES = [4.0, 1.0, 3.0, 2.0]       # not in index order: by speed the workers are 1, 3, 2, 0


class Fixture:
    """A temporary ROOT with runs.json and per-run CSVs."""

    def __init__(self, testcase):
        tmp = tempfile.TemporaryDirectory()
        testcase.addCleanup(tmp.cleanup)
        self.root = Path(tmp.name)
        self.manifest = {"name": "synthetic", "title": "Synthetic test", "metric": "grad_norm_sq", "below": True,
                         "target": 1e-4, "time_axis": "virtual", "real_scale": 0.0, "methods": [],
                         "outages": [], "tuning": None}

    def method(self, label, slug, seeds=(1,), files=None, only=None):
        """files(seed) -> {file name: text}; default: evaluations, workers and staleness
        (only: just these of them, to draw fewer charts)."""
        index = len(self.manifest["methods"])
        runs = []
        for seed in seeds:
            rel = f"seed-{seed}/{slug}" if len(seeds) > 1 else slug
            content = files(seed) if files else {
                "evaluations.csv": evaluations(TIMES, index, seed),
                "workers.csv": workers(MODEL_TIMES, [90.0 - 10 * index - w for w in range(4)]),
                "staleness.csv": staleness([10, 5, 3, 0, 0, 1 + index, 1])}
            content = {k: v for k, v in content.items() if only is None or k in only}
            for name, text in content.items():
                path = self.root / rel / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
            runs.append({"seed": seed, "dir": rel})
        self.manifest["methods"].append({"label": label, "runs": runs})
        return self

    def write(self, **fields):
        self.manifest.update(fields)
        (self.root / "runs.json").write_text(json.dumps(self.manifest, ensure_ascii=False), encoding="utf-8")
        return self


class PlotTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not HAVE_LIBS:
            raise unittest.SkipTest("numpy and matplotlib are needed (try /usr/bin/python3)")
        plot_module()

    def plot(self, root, *args, expect=0):
        """Run main() in-process; return (exit status, stdout, stderr, charts.json entries by file)."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = plot_module().main([str(root), *map(str, args)])
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        self.assertEqual(rc, expect, f"exit status {rc}\nstdout:\n{out.getvalue()}\nstderr:\n{err.getvalue()}")
        described = {}
        outdir = Path(args[args.index("--out") + 1]) if "--out" in args else Path(root)
        if rc == 0:
            described = {e["file"]: e for e in json.loads((outdir / "charts.json").read_text(encoding="utf-8"))}
        return rc, out.getvalue(), err.getvalue(), described

    def standard(self, seeds=(1, 2), only=None):
        f = Fixture(self)
        for label, slug in (("Ringmaster", "ringmaster"), ("vanilla ASGD", "vanilla-asgd"), ("Rennala", "rennala")):
            f.method(label, slug, seeds, only=only)
        return f.write()

    @staticmethod
    def series(entry, label=None, kinds=None):
        return [s for p in entry["panels"] for s in p["series"]
                if (label is None or s["label"] == label) and (kinds is None or s["kind"] in kinds)]

    @staticmethod
    def x_order(entry):
        if "x_order" in entry:
            return entry["x_order"]
        return next(p["x_order"] for p in entry["panels"] if "x_order" in p)

    @staticmethod
    def heights(series):
        for key in ("y", "values", "heights"):
            if key in series:
                return [v or 0.0 for v in series[key]]
        raise AssertionError(f"no bar heights in {sorted(series)}")

    # ------------------------------------------------------------------------- styling
    def test_each_method_keeps_its_colour_and_marker_in_every_chart(self):
        f = self.standard()
        _, _, _, charts = self.plot(f.root)
        for name in ("metric.png", "utilisation.png", "staleness.png"):
            self.assertIn(name, charts)
        styles = {}
        for m in f.manifest["methods"]:
            seen = set()
            for name in ("metric.png", "utilisation.png", "staleness.png"):
                marked = [s for s in self.series(charts[name], m["label"]) if s["kind"] != "band"]
                self.assertTrue(marked, f"{m['label']} missing from {name}")
                seen |= {(s["color"].lower(), s["marker"]) for s in marked}
            self.assertEqual(len(seen), 1, f"{m['label']}: {seen}")
            color, marker = seen.pop()
            self.assertTrue(marker, f"{m['label']} has no marker")
            styles[m["label"]] = (color, marker)
        self.assertEqual(len(set(c for c, _ in styles.values())), 3, styles)
        self.assertEqual(len(set(k for _, k in styles.values())), 3, styles)

    def test_log_scale_for_gradient_norm_and_loss_linear_for_accuracy(self):
        f = self.standard(seeds=(1,), only=("evaluations.csv",))
        _, _, _, charts = self.plot(f.root)
        panels = charts["metric.png"]["panels"]
        self.assertEqual(panels[0]["yscale"], "log")
        self.assertIn("gradient norm", panels[0]["ylabel"])
        loss = [p for p in panels if "loss" in p["ylabel"]]
        self.assertEqual(len(loss), 1, [p["ylabel"] for p in panels])
        self.assertEqual(loss[0]["yscale"], "log")
        f.write(metric="accuracy", below=False, target=0.5)
        _, _, _, charts = self.plot(f.root)
        first = charts["metric.png"]["panels"][0]
        self.assertEqual(first["yscale"], "linear")
        self.assertEqual(first["ylabel"], "test accuracy")

    def test_time_axis_labels_carry_units(self):
        f = self.standard(seeds=(1,), only=("evaluations.csv", "workers.csv"))
        for axis, expect in (("virtual", ("virtual time", "τ")), ("epochs", ("epochs",)), ("real", ("wall", "(s)"))):
            f.write(time_axis=axis)
            _, _, _, charts = self.plot(f.root)
            for p in charts["metric.png"]["panels"]:
                for word in expect:
                    self.assertIn(word, p["xlabel"], axis)
            if axis == "epochs":
                self.assertNotIn("utilisation.png", charts)
                self.assertFalse((f.root / "utilisation.png").exists(), "stale utilisation chart left")

    def test_target_line_is_drawn_and_labelled(self):
        f = self.standard(seeds=(1,), only=("evaluations.csv",))
        _, _, _, charts = self.plot(f.root)
        hlines = charts["metric.png"]["panels"][0]["hlines"]
        self.assertEqual(len(hlines), 1, hlines)
        self.assertAlmostEqual(hlines[0]["y"], 1e-4)
        self.assertEqual(hlines[0]["label"], "target 1e-4")
        f.write(target=None)
        _, _, _, charts = self.plot(f.root)
        self.assertEqual(charts["metric.png"]["panels"][0]["hlines"], [])

    def test_methods_identical_bit_for_bit_are_one_line_labelled_with_both(self):
        f = Fixture(self)
        same = {"evaluations.csv": evaluations(TIMES, 0, 1)}
        f.method("BSP", "bsp", files=lambda s: same).method("SelSync 0", "selsync-0", files=lambda s: same)
        f.method("local SGD", "local-sgd", only=("evaluations.csv",)).write()
        _, _, _, charts = self.plot(f.root)
        lines = [s["label"] for s in self.series(charts["metric.png"], kinds=("line",))]
        self.assertIn("BSP = SelSync 0", lines)
        self.assertIn("local SGD", lines)
        self.assertNotIn("SelSync 0", lines)
        self.assertNotIn("BSP", lines)

    def test_runs_ending_more_than_ten_times_apart_get_a_log_time_axis(self):
        f = Fixture(self)
        f.method("slow", "slow", files=lambda s: {"evaluations.csv": evaluations([t * 20 for t in TIMES], 0, s)})
        f.method("fast", "fast", files=lambda s: {"evaluations.csv": evaluations(TIMES, 1, s)}).write()
        _, _, _, charts = self.plot(f.root)
        for p in charts["metric.png"]["panels"]:
            self.assertEqual(p["xscale"], "log", p["xlabel"])
            self.assertIn("log scale", p["xlabel"])
        f2 = self.standard(seeds=(1,), only=("evaluations.csv",))
        _, _, _, charts = self.plot(f2.root)
        self.assertTrue(all(p["xscale"] == "linear" for p in charts["metric.png"]["panels"]))

    def test_an_accuracy_axis_zooms_on_the_late_range_when_the_first_points_squeeze_it(self):
        acc = [0.1] + [0.80 + 0.001 * k for k in range(1, len(TIMES))]
        f = Fixture(self)
        f.method("a", "a", files=lambda s: {"evaluations.csv": evaluations(TIMES, 0, s, accuracy=acc)}).write(
            metric="accuracy", below=False, target=0.805)
        _, _, _, charts = self.plot(f.root)
        first = charts["metric.png"]["panels"][0]
        lo, hi = first["ylim"]
        self.assertGreater(lo, 0.7)                 # 0.1 is off the axis ...
        self.assertLessEqual(lo, min(acc[1:]))      # ... the rest and the target on it
        self.assertGreaterEqual(hi, max(acc))
        self.assertTrue(lo <= 0.805 <= hi)
        series = self.series(charts["metric.png"], "a", kinds=("line",))[0]
        self.assertAlmostEqual(series["y"][0], 0.1)  # charts.json keeps every value
        # A curve that uses its range is not zoomed.
        f2 = self.standard(seeds=(1,), only=("evaluations.csv",))
        f2.write(metric="accuracy", below=False, target=0.5)
        _, _, _, charts = self.plot(f2.root)
        self.assertNotIn("ylim", charts["metric.png"]["panels"][0])

    def test_equal_model_times_are_named_once_not_ordered_by(self):
        f = Fixture(self)
        for k in range(2):
            f.method(f"m{k}", f"m{k}", files=lambda s: {"evaluations.csv": evaluations(TIMES),
                                                         "workers.csv": workers([2.0] * 4, [50, 60, 70, 80])})
        f.write()
        _, _, _, charts = self.plot(f.root)
        label = charts["utilisation.png"]["panels"][0]["xlabel"]
        self.assertNotIn("fastest", label)
        self.assertIn("2τ", label)
        # An unpaced real run's times per job are measured, and said to be.
        f2 = self.standard(seeds=(1,), only=("evaluations.csv", "workers.csv"))
        f2.write(time_axis="real", real_scale=0.0)
        _, _, _, charts = self.plot(f2.root)
        label = charts["utilisation.png"]["panels"][0]["xlabel"]
        self.assertIn("measured time per job", label)

    def test_utilisation_orders_workers_by_speed(self):
        f = self.standard()
        f.write(outages=[{"worker": 2, "begin": 10.0, "end": 30.0}])
        _, _, _, charts = self.plot(f.root)
        entry = charts["utilisation.png"]
        self.assertEqual(self.x_order(entry), [1, 3, 2, 0])
        self.assertTrue(self.series(entry, kinds=("bar",)), "four workers: grouped bars")
        for p in entry["panels"]:
            if "outage_workers" in p:
                self.assertEqual(p["outage_workers"], [2])
            if p["series"]:
                self.assertEqual(p["ylabel"].split(":")[0].split(" (")[0], "utilisation")

    def test_utilisation_values_are_the_mean_over_seeds(self):
        f = Fixture(self)
        f.method("A", "a", (1, 2), files=lambda seed: {
            "evaluations.csv": evaluations(TIMES),
            "workers.csv": workers(MODEL_TIMES, [20.0 * seed, 40.0, 60.0, 80.0])})
        f.write()
        _, _, _, charts = self.plot(f.root)
        bar = self.series(charts["utilisation.png"], "A")[0]
        order = self.x_order(charts["utilisation.png"])
        expect = {0: 0.3, 1: 0.4, 2: 0.6, 3: 0.8}           # busy / (busy + idle + waiting), seeds averaged
        for w, h in zip(order, self.heights(bar)):
            self.assertAlmostEqual(h, expect[w], places=9)

    def test_staleness_histogram_has_no_joining_lines_and_sums_to_one(self):
        f = self.standard()
        f.method("synchronous SGD", "sync", (1, 2), files=lambda seed: {
            "evaluations.csv": evaluations(TIMES, 3, seed), "staleness.csv": staleness([100, 0, 0])})
        f.write()
        _, _, _, charts = self.plot(f.root)
        entry = charts["staleness.png"]
        kinds = {s["kind"] for s in self.series(entry)}
        self.assertTrue(kinds <= {"bar", "step"}, kinds)
        labels = {s["label"] for s in self.series(entry)}
        self.assertEqual(labels, {"Ringmaster", "vanilla ASGD", "Rennala"}, "staleness-free methods are left out")
        for s in self.series(entry):
            self.assertAlmostEqual(sum(self.heights(s)), 1.0, places=9)

    def test_large_staleness_ranges_are_binned(self):
        applied = [0] * 3001
        applied[0], applied[1], applied[3], applied[700], applied[3000] = 5, 4, 3, 2, 1
        f = Fixture(self)
        f.method("A", "a", files=lambda seed: {"evaluations.csv": evaluations(TIMES),
                                                "staleness.csv": staleness(applied)}).write()
        _, _, _, charts = self.plot(f.root)
        (s,) = self.series(charts["staleness.png"])
        self.assertIn(s["kind"], ("bar", "step"))
        self.assertLessEqual(len(self.heights(s)), 16, "3001 staleness values should be binned")
        self.assertAlmostEqual(sum(self.heights(s)), 1.0, places=9)

    # ------------------------------------------------------------------------- statistics
    def test_mean_and_band_over_three_seeds(self):
        values = {1: [0.10, 0.40, 0.60, 0.70], 2: [0.20, 0.50, 0.65, 0.80], 3: [0.30, 0.45, 0.75, 0.90]}
        times = [0, 10, 20, 30]
        f = Fixture(self)
        f.method("A", "a", (1, 2, 3), files=lambda seed: {
            "evaluations.csv": evaluations(times, accuracy=values[seed])})
        f.write(metric="accuracy", below=False, target=None)
        _, _, _, charts = self.plot(f.root)
        mean = [sum(values[s][k] for s in values) / 3 for k in range(4)]
        half = [T_975_2 * math.sqrt(sum((values[s][k] - mean[k]) ** 2 for s in values) / 2) / math.sqrt(3)
                for k in range(4)]
        panel = charts["metric.png"]["panels"][0]
        line = [s for s in panel["series"] if s["kind"] == "line"]
        band = [s for s in panel["series"] if s["kind"] == "band"]
        self.assertEqual(len(line), 1)
        self.assertEqual(len(band), 1)
        self.assertEqual(band[0]["color"].lower(), line[0]["color"].lower())
        self.assertIn("shaded: 95% interval of the mean (3 seeds)", charts["metric.png"]["legend"])
        if "y" in line[0]:
            for got, want in zip(line[0]["y"], mean):
                self.assertAlmostEqual(got, want, places=12)
        if "low" in band[0]:
            for lo, hi, m, h in zip(band[0]["low"], band[0]["high"], mean, half):
                self.assertTrue(math.isclose((hi - lo) / 2, h, rel_tol=1e-9), (hi - lo, h))
                self.assertAlmostEqual((hi + lo) / 2, m, places=12)
        # the same through the module's own aggregation, with seeds evaluated at different times
        import numpy as np
        grid, m, h = plot_module().mean_band([(np.array(times, float), np.array(values[s])) for s in (1, 2, 3)])
        np.testing.assert_allclose(m, mean, rtol=1e-12)
        np.testing.assert_allclose(h, half, rtol=1e-9)
        shifted = [(np.array([0.0, 10, 20, 30]), np.array([0.0, 1, 2, 3])),
                   (np.array([5.0, 15, 25, 35]), np.array([0.5, 1.5, 2.5, 3.5]))]
        grid, m, h = plot_module().mean_band(shifted)
        self.assertEqual((grid[0], grid[-1]), (5.0, 30.0), "only the range both seeds cover")
        np.testing.assert_allclose(m, grid / 10, rtol=1e-12)  # both seeds are y = t / 10

    # ------------------------------------------------------------------------- safety
    def test_math_text_and_tex_are_off(self):
        rc = plot_module().matplotlib.rcParams
        self.assertFalse(rc["text.parse_math"])
        self.assertFalse(rc["text.usetex"])

    def test_hostile_labels_are_drawn_as_text(self):
        labels = ["$\\frac{a}{b}$", "two\nlines", "quote \" ' back\\slash %s %d {0}", "x" * 5000,
                  "ünïcödé τ ✓ 中文", "_leading underscore", ""]
        f = Fixture(self)
        for i, label in enumerate(labels):
            f.method(label, f"m{i}", (1, 2))
        f.write(name="$x^2$\n%s", title="T" * 10000 + " $\\alpha$ \\n \"q\"",
                metric="grad_norm_sq", outages=[{"worker": 0, "begin": 0, "end": 5}])
        _, _, _, charts = self.plot(f.root)
        self.assertIn("metric.png", charts)
        for entry in charts.values():
            for s in self.series(entry):
                self.assertNotIn("\n", s["label"])
                self.assertLessEqual(len(s["label"]), 200, "long labels are truncated")
        metric_labels = {s["label"] for s in self.series(charts["metric.png"])}
        self.assertIn("$\\frac{a}{b}$", metric_labels, "a $ label is kept literally")
        self.assertTrue(any(lab.startswith("xxx") and lab.endswith("…") for lab in metric_labels), metric_labels)

    def test_unsafe_run_dirs_are_refused(self):
        for bad in ("../x", "/etc", "seed-1/../../x", "a/..", "..\\x"):
            f = self.standard(seeds=(1,))
            f.manifest["methods"][1]["runs"][0]["dir"] = bad
            f.write()
            _, _, err, _ = self.plot(f.root, expect=2)
            self.assertIn("runs.json", err, bad)
            self.assertIn("methods[1].runs[0].dir", err, bad)
            self.assertFalse(list(f.root.glob("*.png")), "nothing drawn from a refused manifest")

    def test_missing_or_invalid_manifest_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            _, _, err, _ = self.plot(d, expect=2)
            self.assertIn("runs.json", err)
            for text in ("{not json", "[]", json.dumps({"metric": 3, "methods": []}),
                         json.dumps({"metric": "loss", "methods": {}}),
                         json.dumps({"metric": "loss", "methods": [], "time_axis": "sideways"})):
                Path(d, "runs.json").write_text(text, encoding="utf-8")
                _, _, err, _ = self.plot(d, expect=2)
                self.assertIn("runs.json", err, text)

    def test_malformed_csvs_do_not_crash(self):
        good = evaluations(TIMES)
        broken = {
            "ragged": good + "110,1,2\n1,2,3,4,5,6,7,8,9\n",
            "cells": good.replace("\n20,", "\ntwenty,") + "120,nan,inf,-inf,5,6,7\n",
            "no-header": "1,2,3\n4,5,6\n",
            "empty": "",
            "comments-only": "# nothing here\n",
            "garbage": b"\x00\xff\xfe,\x89PNG\n\x00\x00\n",
        }
        f = Fixture(self)
        for name, text in broken.items():
            f.method(name, name, files=lambda seed, text=text: {
                "evaluations.csv": text, "workers.csv": "worker,busy\n0,1,2\nx,y\n", "staleness.csv": text})
        f.method("missing files", "missing", files=lambda seed: {})
        f.write()
        _, out, err, charts = self.plot(f.root)
        self.assertIn("metric.png", charts)
        self.assertIn("warning", err)
        drawn = {s["label"] for s in self.series(charts["metric.png"])}
        self.assertIn("ragged", drawn)
        self.assertIn("cells", drawn)

    # ------------------------------------------------------------------------- output
    def test_outputs_are_complete_and_no_temporary_files_are_left(self):
        f = self.standard()
        with tempfile.TemporaryDirectory() as out:
            _, stdout, _, charts = self.plot(f.root, "--out", out)
            printed = [ln[len("chart: "):] for ln in stdout.splitlines() if ln.startswith("chart: ")]
            self.assertEqual(sorted(Path(p).name for p in printed), sorted(charts))
            for p in printed:
                data = Path(p).read_bytes()
                self.assertTrue(data.startswith(PNG_SIGNATURE), p)
                self.assertTrue(data.endswith(b"IEND\xaeB`\x82"), f"{p} is truncated")
            left = [n for n in os.listdir(out) if n.startswith(".") or "tmp" in n]
            self.assertEqual(left, [])
            self.assertFalse(list(f.root.glob("*.png")), "--out keeps ROOT clean")

    def test_other_formats(self):
        f = self.standard(seeds=(1,), only=("evaluations.csv",))
        _, _, _, charts = self.plot(f.root, "--format", "pdf")
        self.assertIn("metric.pdf", charts)
        self.assertTrue((f.root / "metric.pdf").read_bytes().startswith(b"%PDF"))
        _, _, _, charts = self.plot(f.root, "--format", "svg")
        self.assertIn(b"<svg", (f.root / "metric.svg").read_bytes()[:500])

    def test_sim_vs_real_draws_measured_and_predicted_in_one_colour(self):
        def files(seed):
            measured = evaluations(TIMES).splitlines()
            header = measured[2] + ",wall_seconds"
            rows = [ln + f",{float(ln.split(',')[0]) * 0.011}" for ln in measured[3:]]
            return {"evaluations.csv": "\n".join(measured[:2] + [header] + rows) + "\n",
                    "predicted/evaluations.csv": evaluations(TIMES)}
        f = Fixture(self)
        f.method("A", "a", files=files).method("B", "b", files=files)
        f.write(time_axis="real", real_scale=0.01, metric="accuracy", below=False, target=0.5)
        _, _, _, charts = self.plot(f.root)
        entry = charts["sim_vs_real.png"]
        self.assertIn("wall", entry["panels"][0]["xlabel"])
        # One panel per method, each with its measured and its predicted line only.
        self.assertEqual([p["title"] for p in entry["panels"]], ["A", "B"])
        for p in entry["panels"]:
            lines = [s["label"] for s in p["series"] if s["kind"] == "line"]
            self.assertEqual(lines, [p["title"] + " (measured)", p["title"] + " (predicted)"])
        for label in ("A", "B"):
            mine = [s for s in self.series(entry) if s["label"].startswith(label) and s["kind"] == "line"]
            self.assertGreaterEqual(len(mine), 2, [s["label"] for s in self.series(entry)])
            self.assertEqual(len({s["color"].lower() for s in mine}), 1)

    def test_tuning_chart(self):
        f = self.standard(seeds=(1,), only=("evaluations.csv",))
        def cand(lr, mean, reached=3):
            return {"setting": {"optimizer.lr": lr}, "reached": reached, "seeds": 3,
                    "score": {"mean": mean, "sd": None if mean is None else 1.0,
                              "ci95": None if mean is None else 2.5, "n": reached}}
        f.write(tuning={"criterion": "time_to_target", "keys": ["optimizer.lr"], "methods": [
            {"label": "Ringmaster", "chosen": {"optimizer.lr": 0.1},
             "candidates": [cand(0.001, 40.0), cand(0.01, 20.0, 2), cand(0.1, 12.0), cand(1.0, None, 0)]},
            {"label": "Rennala", "chosen": {"optimizer.lr": 0.1, "gradients": 4},
             "candidates": [{"setting": {"optimizer.lr": lr, "gradients": g}, "reached": 1, "seeds": 1,
                             "score": {"mean": 10.0 * lr + g, "sd": None, "ci95": None, "n": 1}}
                            for lr in (0.01, 0.1) for g in (4, 16)]}]})
        _, _, _, charts = self.plot(f.root)
        entry = charts["tuning.png"]
        bars = self.series(entry, "Ringmaster", kinds=("errorbar",))
        self.assertEqual(len(bars), 1)
        ring = next(p for p in entry["panels"] if any(s["label"] == "Ringmaster" for s in p["series"]))
        self.assertEqual(ring["xscale"], "log", "lr spans 1000x")

    def test_command_line(self):
        f = self.standard(seeds=(1,), only=("evaluations.csv",))
        p = subprocess.run([sys.executable, str(SCRIPT), str(f.root)], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"chart: {f.root / 'metric.png'}", p.stdout.splitlines())
        p = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 2, "usage error")


if __name__ == "__main__":
    if not HAVE_LIBS and os.access("/usr/bin/python3", os.X_OK) and \
            os.path.realpath("/usr/bin/python3") != os.path.realpath(sys.executable) and \
            subprocess.run(["/usr/bin/python3", "-c", "import numpy, matplotlib"], capture_output=True).returncode == 0:
        os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
    unittest.main()
