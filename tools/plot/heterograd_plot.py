#!/usr/bin/env python3
"""Draw the charts of a heterograd-run output folder.

Command line:
    python3 tools/plot/heterograd_plot.py ROOT [--out DIR] [--format png|pdf|svg]

heterograd-run runs this at the end of every run; run it by hand to restyle.
Only the standard library, numpy and matplotlib (Agg backend) are used.

Input: ROOT/runs.json, written by the driver:
    name, title      text for the chart titles (arbitrary user text)
    metric           target metric, a column of evaluations.csv (required)
    below            true: smaller is better (default true)
    target           number or null
    time_axis        "virtual" (units of tau), "epochs" or "real" (wall seconds)
    real_scale       real clock: seconds per model unit of the prediction (0: already seconds)
    methods          [{label, runs: [{seed, dir}]}], dir relative to ROOT, no '..' (required)
    outages          [{worker, begin, end}]
    tuning           null or {criterion, keys, methods: [{label, chosen: {key: value},
                     candidates: [{setting, score: {mean, sd, ci95, n}, reached, seeds}]}]}
Each run dir may hold evaluations.csv, workers.csv, staleness.csv and (real clock)
predicted/evaluations.csv; '#' lines are comments, then a header row.

Output, in DIR (default ROOT): metric, utilisation, staleness, sim_vs_real and tuning
charts (those that apply), each written to a temporary file and renamed into place,
and charts.json describing what was drawn (labels, scales, series, colours) so tests
can check the styling without reading pixels.  Each chart written is printed as
"chart: <path>".  Exit status: 0 success, 1 a chart failed, 2 bad manifest or usage.
"""
import argparse
import csv
import itertools
import json
import math
import os
import re
import sys
import tempfile
import textwrap
import traceback

try:
    import numpy as np
    import matplotlib
except ImportError as _e:  # e.g. a python3 on PATH without the Debian packages
    sys.exit(f"heterograd_plot: error: needs numpy and matplotlib ({_e}); "
             "install python3-matplotlib or run with /usr/bin/python3")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import colors as mcolors, ticker, transforms  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.container import BarContainer, ErrorbarContainer  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

# User text is drawn literally: no mathtext, no TeX.  Log ticks use a plain-text
# formatter (_LogFormatter) because matplotlib's default one relies on mathtext.
matplotlib.rcParams.update({
    "text.parse_math": False, "text.usetex": False, "axes.formatter.use_mathtext": False,
    "font.size": 10, "axes.titlesize": 10, "axes.labelsize": 10, "xtick.labelsize": 9,
    "ytick.labelsize": 9, "legend.fontsize": 9, "figure.titlesize": 11,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
    "grid.alpha": 0.3, "grid.linewidth": 0.6, "lines.linewidth": 1.6, "lines.markersize": 5,
    "savefig.dpi": 200, "pdf.fonttype": 42, "ps.fonttype": 42, "svg.hashsalt": "heterograd",
})

# Okabe-Ito (colour-blind safe), yellow last; markers cycle independently (40 distinct pairs).
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]
TIME_LABEL = {"virtual": "virtual time (units of τ)", "epochs": "epochs", "real": "wall time (s)"}
TIME_UNIT = {"virtual": "units of τ", "epochs": "epochs", "real": "s"}
METRIC_LABEL = {"accuracy": "test accuracy", "grad_norm_sq": "squared gradient norm ‖∇f(x)‖²",
                "grad_norm": "gradient norm ‖∇f(x)‖", "loss": "loss"}
CHART_NAMES = ("metric", "utilisation", "staleness", "sim_vs_real", "tuning")
LEGEND_CHARS = 48        # longest legend label before an ellipsis
MAX_GRID = 2000          # most points of a seed-mean curve
_counter = itertools.count()
UMASK = os.umask(0o022)
os.umask(UMASK)


class ManifestError(Exception):
    pass


def warn(msg):
    print(f"heterograd_plot: warning: {msg}", file=sys.stderr)


def clean(text, limit=LEGEND_CHARS):
    """User text made safe to draw: one line, no control characters, at most limit chars."""
    s = re.sub(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\s]+", " ", str(text)).strip()
    return s if len(s) <= limit else s[:limit - 1].rstrip() + "…"


def title_text(text, width=100, lines=2):
    """Title text: cleaned, wrapped to width characters, at most lines lines."""
    return "\n".join(textwrap.wrap(clean(text, width * lines), width)[:lines])


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def fmt_num(v):
    """Compact number: 0.5, 250, 1e-4, 2.5e5."""
    if not is_num(v) or not math.isfinite(v):
        return str(v)
    if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e5):
        m, e = f"{v:.2e}".split("e")
        return f"{m.rstrip('0').rstrip('.')}e{int(e)}"
    return f"{v:.4g}"


def t_quantile(df, p=0.975):
    """Student t quantile for integer df, by bisection on the closed-form CDF
    (Abramowitz & Stegun 26.7.3-4: A(t|df) = P(|T| <= t))."""
    def a(t):
        th = math.atan2(t, math.sqrt(df))
        s, c2 = t / math.sqrt(t * t + df), df / (t * t + df)   # sin(th), cos(th)^2
        if df % 2 == 0:
            term = total = 1.0
            for k in range(2, df, 2):
                term *= c2 * (k - 1) / k
                total += term
            return s * total
        total, term = 0.0, math.sqrt(c2)
        for k in range(3, df, 2):
            total += term
            term *= c2 * (k - 1) / k
        return 2 / math.pi * (th + (s * (total + term) if df > 1 else 0.0))
    lo, hi, goal = 0.0, 1e7, 2 * p - 1
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if a(mid) < goal else (lo, mid)
    return (lo + hi) / 2


# ----------------------------------------------------------------------------- input
def read_table(path, quiet=False):
    """A numeric CSV as {column: float array}: '#' comments skipped, first row the
    header, ragged or non-numeric rows dropped with a warning.  None when unusable."""
    if not os.path.isfile(path):
        if not quiet:
            warn(f"{path}: missing; skipped")
        return None
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            rows = list(csv.reader(ln for ln in f if ln.strip() and not ln.lstrip().startswith("#")))
    except (OSError, csv.Error) as e:
        warn(f"{path}: cannot read ({e}); skipped")
        return None
    if not rows:
        warn(f"{path}: empty; skipped")
        return None
    header = [h.strip() for h in rows[0]]
    numeric_header = True
    try:
        [float(h) for h in header]
    except ValueError:
        numeric_header = False
    if numeric_header or not all(header):
        warn(f"{path}: no header row; skipped")
        return None
    good, bad = [], 0
    for r in rows[1:]:
        try:
            if len(r) != len(header):
                raise ValueError
            good.append([float(c) for c in r])
        except ValueError:
            bad += 1
    if bad:
        warn(f"{path}: {bad} malformed row(s) skipped")
    data = np.array(good, dtype=float).reshape(-1, len(header))
    table = {}
    for i, h in enumerate(header):
        table.setdefault(h, data[:, i])
    return table


def load_manifest(root):
    path = os.path.join(root, "runs.json")
    try:
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
    except OSError as e:
        raise ManifestError(f"{path}: cannot read: {e.strerror or e}")
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise ManifestError(f"{path}: not valid JSON: {e}")

    def bad(field, what):
        raise ManifestError(f"{path}: {field}: {what}")
    if not isinstance(m, dict):
        bad("top level", "must be a JSON object")
    metric = m.get("metric")
    if not isinstance(metric, str) or not metric:
        bad("metric", "must be a non-empty string")
    axis = m.get("time_axis", "virtual")
    if axis not in TIME_LABEL:
        bad("time_axis", "must be \"virtual\", \"epochs\" or \"real\"")
    below = m.get("below", True)
    if not isinstance(below, bool):
        bad("below", "must be true or false")
    target = m.get("target")
    if target is not None and not is_num(target):
        bad("target", "must be a number or null")
    scale = m.get("real_scale", 0.0)
    if scale is None:
        scale = 0.0
    if not is_num(scale) or not scale >= 0 or not math.isfinite(scale):
        bad("real_scale", "must be a number >= 0")
    methods = m.get("methods")
    if not isinstance(methods, list):
        bad("methods", "must be a list")
    out = []
    for i, meth in enumerate(methods):
        if not isinstance(meth, dict) or not isinstance(meth.get("runs", []), list):
            bad(f"methods[{i}]", "must be an object with a list \"runs\"")
        raw = meth.get("label")
        raw = f"method {i + 1}" if raw is None or str(raw).strip() == "" else str(raw)
        runs = []
        for j, run in enumerate(meth.get("runs", [])):
            d = run.get("dir") if isinstance(run, dict) else None
            field = f"methods[{i}].runs[{j}].dir"
            if not isinstance(d, str) or not d.strip():
                bad(field, "must be a non-empty string")
            if (os.path.isabs(d) or d[0] in "/\\" or re.match(r"[A-Za-z]:", d) or "\0" in d
                    or ".." in re.split(r"[\\/]+", d)):
                bad(field, f"{clean(repr(d), 200)} must be a relative path inside ROOT without '..'")
            runs.append({"seed": run.get("seed"), "dir": os.path.join(root, d)})
        out.append({"raw": raw, "label": clean(raw), "runs": runs, "color": PALETTE[i % len(PALETTE)],
                    "marker": MARKERS[i % len(MARKERS)]})
    outages = m.get("outages") or []
    if not isinstance(outages, list):
        bad("outages", "must be a list")
    outage_workers = set()
    for k, o in enumerate(outages):
        if isinstance(o, dict) and is_num(o.get("worker")) and o["worker"] == int(o["worker"]):
            outage_workers.add(int(o["worker"]))
        else:
            warn(f"{path}: outages[{k}] has no integer worker; ignored")
    tuning = m.get("tuning")
    if tuning is not None and not isinstance(tuning, dict):
        bad("tuning", "must be an object or null")
    return {"name": str(m.get("name") or ""), "title": str(m.get("title") or m.get("name") or ""),
            "metric": metric, "below": below, "axis": axis, "scale": float(scale), "methods": out,
            "target": float(target) if target is not None and math.isfinite(target) else None,
            "outage_workers": outage_workers, "tuning": tuning, "tables": {}}


def table(ctx, run_dir, name, quiet=True):
    key = (run_dir, name)
    if key not in ctx["tables"]:
        ctx["tables"][key] = read_table(os.path.join(run_dir, name), quiet)
    return ctx["tables"][key]


def curve(ctx, run, col, predicted=False):
    """(x, y) of one run's column against the chart's time axis, finite and sorted."""
    t = table(ctx, run["dir"], "predicted/evaluations.csv" if predicted else "evaluations.csv",
              quiet=predicted)
    if t is None or col not in t or "time" not in t and "wall_seconds" not in t:
        return None
    axis, scale = ctx["axis"], ctx["scale"]
    if axis == "epochs" and "epochs" in t:
        x = t["epochs"]
    elif axis == "real" and not predicted and "wall_seconds" in t:
        x = t["wall_seconds"]
    elif "time" in t:
        x = t["time"] * (scale if axis == "real" and scale > 0 else 1.0)
    else:
        return None
    y = t[col]
    ok = np.isfinite(x) & np.isfinite(y)
    order = np.argsort(x[ok], kind="stable")
    return (x[ok][order], y[ok][order]) if ok.any() else None


def mean_band(curves):
    """Mean across seeds on a common grid (the seeds' evaluation times within the range
    all seeds cover) and the 95% CI half-width of the mean (Student t); half is None
    for a single seed."""
    if len(curves) == 1:
        return curves[0][0], curves[0][1], None
    lo, hi = max(c[0][0] for c in curves), min(c[0][-1] for c in curves)
    if lo >= hi:
        warn("seeds' evaluation times do not overlap; drawing the longest seed only")
        x, y = max(curves, key=lambda c: len(c[0]))
        return x, y, None
    grid = np.unique(np.concatenate([c[0][(c[0] >= lo) & (c[0] <= hi)] for c in curves]))
    if len(grid) > MAX_GRID:
        grid = np.linspace(lo, hi, MAX_GRID)
    ys = np.array([np.interp(grid, x, y) for x, y in curves])
    n = len(curves)
    return grid, ys.mean(axis=0), t_quantile(n - 1) * ys.std(axis=0, ddof=1) / math.sqrt(n)


# ----------------------------------------------------------------------------- drawing helpers
def tag(artist, kind, proxy=None, **data):
    """Mark an artist for charts.json (kind, its legend proxy, extra data)."""
    artist.hg = {"kind": kind, "n": next(_counter), "proxy": proxy, "data": data}
    return artist


def proxy(meth, line=True):
    return Line2D([], [], color=meth["color"], marker=meth["marker"], linestyle="-" if line else "none",
                  markersize=6 if line else 8)


def fig_legend(fig, entries, width):
    """Legend below the panels (never over data).  Labels are set after creation,
    since matplotlib drops entries whose label starts with '_'."""
    if not entries:
        return None
    longest = max(len(lab) for _, lab in entries)
    ncol = max(1, min(len(entries), int(width / (0.5 + 0.072 * longest))))
    leg = fig.legend([h for h, _ in entries], [f"e{i}" for i in range(len(entries))], loc="upper center",
                     bbox_to_anchor=(0.5, 0.0), ncol=ncol, frameon=False, handlelength=2.5)
    for text, (_, lab) in zip(leg.get_texts(), entries):
        text.set_text(lab)
    return leg


class _LogFormatter(ticker.Formatter):
    """Log-axis tick labels as plain text (0.5, 10⁻⁴, 2×10⁻⁵): matplotlib's own log
    formatter needs mathtext, which is off.  Narrow axes label 2 and 5 (or every
    minor tick), wide ones only the decades."""
    SUP = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")

    def __call__(self, x, pos=None):
        lo, hi = sorted(self.axis.get_view_interval()) if self.axis else (x, x)
        if not x > 0 or not lo > 0:
            return ""
        span = math.log10(hi / lo)
        e = math.floor(math.log10(x) + 1e-9)
        m = round(x / 10 ** e, 6)
        keep = {1} if span > 2.5 else {1, 2, 5} if span > 1 else set(range(1, 10))
        if m not in keep:
            return ""
        if 1e-3 <= lo and hi <= 1e4 and span <= 3:
            return f"{x:g}"
        return ("" if m == 1 else f"{m:g}×") + "10" + str(e).translate(self.SUP)


def set_log(ax, axis="y"):
    getattr(ax, f"set_{axis}scale")("log")
    a = ax.yaxis if axis == "y" else ax.xaxis
    a.set_major_formatter(_LogFormatter())
    a.set_minor_formatter(_LogFormatter())


def metric_label(col):
    return METRIC_LABEL.get(col, clean(col.replace("_", " "), 60))


def wants_log(ctx, col):
    return (col == ctx["metric"] and ctx["below"]) or "grad_norm" in col or "loss" in col


def markevery(x, mi, nm):
    """About 8 markers per curve, staggered between methods so they do not pile up."""
    if len(x) <= 15:
        return None
    pos = x[0] + (np.arange(8) + (mi + 0.5) / max(nm, 1)) * (x[-1] - x[0]) / 8
    return sorted(set(np.clip(np.searchsorted(x, pos), 0, len(x) - 1).tolist()))


def hex_color(c):
    return mcolors.to_hex(c, keep_alpha=False)


def _jsonable(a):
    return [None if not math.isfinite(v) else float(v) for v in np.asarray(a, dtype=float)]


def describe(fig, file):
    """charts.json entry, read back from the drawn Axes."""
    panels = []
    for ax in fig.axes:
        arts = [a for a in list(ax.lines) + list(ax.collections) + list(ax.containers) if hasattr(a, "hg")]
        series, hlines = [], []
        for a in sorted(arts, key=lambda a: a.hg["n"]):
            kind, px, data = a.hg["kind"], a.hg["proxy"], dict(a.hg["data"])
            if kind == "hline":
                hlines.append({"y": float(a.get_ydata()[0]), "label": a.get_label()})
                continue
            if isinstance(a, Line2D):
                color, marker = a.get_color(), a.get_marker()
                data.setdefault("x", _jsonable(a.get_xdata()))
                data.setdefault("y", _jsonable(a.get_ydata()))
                data["linestyle"] = a.get_linestyle()
            elif isinstance(a, BarContainer):
                color, marker = a.patches[0].get_facecolor(), px.get_marker() if px else None
                data["y"] = _jsonable([p.get_height() for p in a.patches])
            elif isinstance(a, ErrorbarContainer):
                color, marker = a.lines[0].get_color(), a.lines[0].get_marker()
            else:
                color, marker = a.get_facecolor()[0], None
            for k in ("x", "y", "low", "high"):
                if k in data and len(data[k]) > 5000:
                    del data[k]
            series.append({"label": a.get_label(), "color": hex_color(color),
                           "marker": None if marker in (None, "", "None", "none") else marker,
                           "kind": kind, **data})
        panels.append({"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                       "xscale": ax.get_xscale(), "yscale": ax.get_yscale(), "series": series,
                       "hlines": hlines, **getattr(ax, "hg_extra", {})})
    entry = {"file": file, "title": fig._suptitle.get_text() if fig._suptitle else "", "panels": panels,
             "legend": [t.get_text() for leg in fig.legends for t in leg.get_texts()]}
    for p in panels:            # the utilisation chart's worker order, also at the top
        if "x_order" in p:
            entry["x_order"] = p["x_order"]
    return entry


def new_figure(ctx, ncols=1, nrows=1, width=6.4, height=4.0, **kw):
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False, layout="constrained", **kw)
    if ctx["title"]:
        fig.suptitle(title_text(ctx["title"], width=max(50, int(width * 11.5))))
    return fig, axes.ravel()


def draw_mean(ax, ctx, meth, mi, curves, logy, label=None, band=True, **style):
    """Mean line (and 95% band with several seeds) of one method; False if no data."""
    curves = [c for c in curves if c is not None]
    if not curves:
        return False
    x, y, half = mean_band(curves)
    y = np.where(y > 0, y, np.nan) if logy else y
    nm = len(ctx["methods"])
    line, = ax.plot(x, y, color=meth["color"], marker=meth["marker"], markevery=markevery(x, mi, nm),
                    label=label or meth["label"], zorder=3, **style)
    tag(line, "line", proxy(meth))
    if half is not None and band:
        lo, hi = y - half, y + half
        if logy:   # a band reaching <= 0 is cut at the smallest value observed
            floor = min(float(np.min(c[1][c[1] > 0], initial=np.inf)) for c in curves)
            lo = np.where(lo > 0, lo, floor if math.isfinite(floor) else np.nan)
        alpha = 0.2 if len(ctx["methods"]) <= 3 else 0.12
        band = ax.fill_between(x, lo, hi, color=meth["color"], alpha=alpha, linewidth=0,
                               label=meth["label"], zorder=2)
        tag(band, "band", x=_jsonable(x), low=_jsonable(lo), high=_jsonable(hi))
    return True


def draw_target(ax, ctx, logy):
    t = ctx["target"]
    if t is None or (logy and t <= 0):
        return None
    label = f"target {fmt_num(t)}"
    tag(ax.axhline(t, color="0.3", linestyle="--", linewidth=1.1, label=label, zorder=1), "hline")
    return Line2D([], [], color="0.3", linestyle="--", linewidth=1.1), label


def finish_axes(ax, ctx, col, logy, has_data):
    ax.set_xlabel(TIME_LABEL[ctx["axis"]])
    ax.set_ylabel(metric_label(col))
    if logy and has_data:
        set_log(ax)


def spread_out(ax):
    """Methods whose runs end more than 10x apart in time (biased local SGD's epochs take a
    25th of synchronous SGD's): time on a log axis, so that the short runs are not a
    vertical stroke at the left.  The first evaluation, at time 0, is left off."""
    ends = [float(np.nanmax(line.get_xdata())) for line in ax.lines
            if getattr(line, "hg", {}).get("kind") == "line" and len(line.get_xdata())]
    ends = [e for e in ends if math.isfinite(e) and e > 0]
    if len(ends) < 2 or max(ends) <= 10 * min(ends):
        return False
    set_log(ax, "x")
    ax.set_xlabel(ax.get_xlabel() + ", log scale")
    return True


def zoom_late(ax, target=None, logx=False):
    """A linear axis whose first moments (an accuracy climbing from 0.1 in the first
    evaluations) would squeeze the rest into a sliver: the y range of the last 90% of the
    time (and the target), when that is under half the whole range.  The early points run
    off the axis, as in a paper's figure; charts.json keeps every value."""
    xs, ys = [], []
    for line in ax.lines:
        if getattr(line, "hg", {}).get("kind") != "line":
            continue
        x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
        ok = np.isfinite(x) & np.isfinite(y)
        xs.append(x[ok])
        ys.append(y[ok])
    if not xs or not any(len(x) for x in xs):
        return
    if logx:   # the last 90% of the log axis (time 0 is not on it)
        ys = [y[x > 0] for x, y in zip(xs, ys)]
        xs = [np.log(x[x > 0]) for x in xs]
        if not any(len(x) for x in xs):
            return
    x0 = min(float(x.min()) for x in xs if len(x))
    x1 = max(float(x.max()) for x in xs if len(x))
    full = np.concatenate(ys)
    late = np.concatenate([y[x >= x0 + 0.1 * (x1 - x0)] for x, y in zip(xs, ys)])
    if late.size == 0 or not x1 > x0:
        return
    lo, hi = float(late.min()), float(late.max())
    if target is not None and math.isfinite(target):
        lo, hi = min(lo, target), max(hi, target)
    span_full = float(full.max() - full.min())
    if not span_full > 0 or (hi - lo) >= 0.5 * span_full:
        return
    pad = 0.08 * (hi - lo) if hi > lo else 0.05 * max(abs(hi), 1e-12)
    ax.set_ylim(lo - pad, hi + pad)
    ax.hg_extra = {**getattr(ax, "hg_extra", {}), "ylim": [lo - pad, hi + pad]}


def same_curves(methods, curves, cols):
    """Methods whose every run gives the same values in every column (a method that is
    another bit for bit, as SelSync at threshold 0 is BSP) are drawn once, as the first of
    them, labelled "A = B": one line hidden under another would read as a missing method.
    Returns the methods drawn and each one's label."""
    def key(mi):
        out = []
        for col in cols:
            for c in curves[mi][col]:
                out.append(None if c is None else (c[0].tobytes(), c[1].tobytes()))
        return tuple(out)
    shown, label, first = [], {}, {}
    for mi, m in enumerate(methods):
        k = key(mi)
        if all(v is None for v in k) or k not in first:
            first.setdefault(k, mi)
            shown.append(mi)
            label[mi] = m["label"]
        else:
            label[first[k]] += " = " + m["label"]
    for mi in shown:
        label[mi] = clean(label[mi], limit=3 * LEGEND_CHARS)
    return set(shown), label


# ----------------------------------------------------------------------------- charts
def chart_metric(ctx):
    metric, methods = ctx["metric"], ctx["methods"]
    cols = [metric]
    if metric != "loss" and any(curve(ctx, r, "loss") for m in methods for r in m["runs"]):
        cols.append("loss")
    fig, axes = new_figure(ctx, ncols=len(cols), width=5.4 * len(cols) + 0.6, height=4.0)
    curves = [{col: [curve(ctx, r, col) for r in m["runs"]] for col in cols} for m in methods]
    shown, label = same_curves(methods, curves, cols)
    entries, drawn = [], False
    for k, (ax, col) in enumerate(zip(axes, cols)):
        logy = wants_log(ctx, col)
        has = False
        for mi, meth in enumerate(methods):
            if mi not in shown:
                continue
            ok = draw_mean(ax, ctx, meth, mi, curves[mi][col], logy, label=label[mi])
            has |= ok
            if ok and k == 0:
                entries.append((proxy(meth), label[mi]))
        if col == metric and has:
            t = draw_target(ax, ctx, logy)
            entries += [t] if t else []
        finish_axes(ax, ctx, col, logy, has)
        logx = has and spread_out(ax)
        if has and not logy:
            zoom_late(ax, ctx["target"] if col == metric else None, logx)
        drawn |= has
    if not drawn:
        warn(f"no run has finite values of '{clean(metric, 60)}'; no metric chart")
        plt.close(fig)
        return None
    seeds = max((sum(c is not None for c in curves[mi][metric]) for mi in shown), default=0)
    if seeds > 1:   # what the shading is, in the legend
        entries.append((Patch(facecolor="0.55", alpha=0.35, linewidth=0),
                        f"shaded: 95% interval of the mean ({seeds} seeds)"))
    fig_legend(fig, entries, fig.get_figwidth())
    return fig


def chart_utilisation(ctx):
    if ctx["axis"] == "epochs":
        return None
    util, model_time, rank, total_busy = {}, {}, {}, 0.0
    for mi, meth in enumerate(ctx["methods"]):
        per = {}
        for run in meth["runs"]:
            t = table(ctx, run["dir"], "workers.csv")
            if t is None or not all(c in t for c in ("worker", "busy", "idle", "waiting")):
                continue
            denom = t["busy"] + t["idle"] + t["waiting"]
            for i, w in enumerate(t["worker"]):
                if not math.isfinite(w) or not denom[i] > 0:
                    continue
                w = int(w)
                total_busy += t["busy"][i]
                per.setdefault(w, []).append(t["busy"][i] / denom[i])
                if "model_time" in t and math.isfinite(t["model_time"][i]):
                    model_time.setdefault(w, t["model_time"][i])
                if "speed_rank" in t and math.isfinite(t["speed_rank"][i]):
                    rank.setdefault(w, t["speed_rank"][i])
        if per:
            util[mi] = {w: float(np.mean(v)) for w, v in per.items()}
    if not util or not total_busy > 0:
        return None
    speed = model_time if model_time else rank
    order = sorted({w for u in util.values() for w in u}, key=lambda w: (speed.get(w, math.inf), w))
    nw, nm, pos = len(order), len(util), np.arange(len(order))
    bars = nw <= 40
    width = min(14.0, max(6.4, 0.11 * nw * (nm + 1.5))) if bars else min(14.0, max(7.0, 0.05 * nw))
    fig, (ax,) = new_figure(ctx, width=width, height=3.8)
    outage = [k for k, w in enumerate(order) if w in ctx["outage_workers"]]
    entries = []
    for j, (mi, u) in enumerate(util.items()):
        meth = ctx["methods"][mi]
        h = np.array([u.get(w, np.nan) for w in order])
        if bars:
            bw = 0.8 / nm
            c = ax.bar(pos - 0.4 + bw * (j + 0.5), h, bw, color=meth["color"], label=meth["label"],
                       edgecolor="0.15", linewidth=0, zorder=3)
            for k in outage:
                c.patches[k].set_hatch("////")
            tag(c, "bar", proxy(meth, line=False), x=_jsonable(pos - 0.4 + bw * (j + 0.5)))
        else:
            line, = ax.plot(pos, h, color=meth["color"], marker=meth["marker"], linewidth=1.0,
                            markevery=markevery(pos, j, nm), label=meth["label"], zorder=3)
            tag(line, "line")
        entries.append((Patch(facecolor=meth["color"]) if bars else proxy(meth, line=False), meth["label"]))
    if outage:
        if not bars:
            for k in outage:
                ax.axvspan(k - 0.5, k + 0.5, color="0.85", zorder=1, linewidth=0)
        entries.append((Patch(facecolor="white" if bars else "0.85", edgecolor="0.15",
                              hatch="////" if bars else None), "had an outage"))
    # Equal mean times per job (a dynamic model such as OmniLearn's core shares, or equal
    # workers): no order by speed to show, and the one time goes in the axis label.
    times = [model_time[w] for w in order if w in model_time]
    equal = len(times) == nw and max(times) <= min(times) * (1 + 1e-9)
    few = bars and nw <= 16 and model_time and not equal
    if bars:
        ax.set_xticks(pos)
        unit = "τ" if ctx["axis"] == "virtual" else " s"
        ax.set_xticklabels([f"{w}\n{model_time[w]:.3g}{unit}" if few and w in model_time else str(w)
                            for w in order], fontsize=8 if nw > 20 else 9)
        ax.set_xlim(-0.6, nw - 0.4)
        ax.grid(axis="x", visible=False)
    else:
        ticks = np.unique(np.linspace(0, nw - 1, 12).round().astype(int))
        ax.set_xticks(ticks, [str(order[k]) for k in ticks])
    # Unpaced real runs follow no worker-time model: their times per job are measured (by
    # the first method that has them, which sets the order).
    measured = ctx["axis"] == "real" and not ctx["scale"] > 0
    speed_name = ("measured time per job" if measured else "model time per job") if model_time else "speed rank"
    if equal:
        unit = "τ" if ctx["axis"] == "virtual" else " s"
        ax.set_xlabel(f"worker (every worker's mean {'measured' if measured else 'model'} time per job: "
                      f"{times[0]:.3g}{unit})")
    else:
        ax.set_xlabel(f"worker, fastest first (ordered by {speed_name}"
                      + ("; below the index: time per job)" if few else ")"))
    ax.set_ylabel("utilisation: busy / (busy + idle + waiting)")
    ax.set_ylim(0, 1.05)
    ax.hg_extra = {"x_order": order, "outage_workers": [order[k] for k in outage]}
    fig_legend(fig, entries, width)
    return fig


def chart_staleness(ctx):
    counts = {}
    for mi, meth in enumerate(ctx["methods"]):
        acc = np.zeros(0)
        for run in meth["runs"]:
            t = table(ctx, run["dir"], "staleness.csv")
            if t is None or "staleness" not in t or "applied" not in t:
                continue
            ok = np.isfinite(t["staleness"]) & np.isfinite(t["applied"]) & (t["staleness"] >= 0) & (t["applied"] > 0)
            c = np.bincount(t["staleness"][ok].astype(np.int64), weights=t["applied"][ok])
            acc = np.pad(acc, (0, max(0, len(c) - len(acc)))) + np.pad(c, (0, max(0, len(acc) - len(c))))
        if acc.sum() > 0 and acc[1:].sum() > 0:
            counts[mi] = acc / acc.sum()
    if not counts:
        return None
    smax = max(len(c) for c in counts.values()) - 1
    if smax <= 15:   # one bar per staleness value
        edges = list(range(smax + 2))
        labels = [str(s) for s in range(smax + 1)]
    else:            # logarithmic bins: 0, 1, 2-3, 4-7, ...
        edges = [0, 1] + [2 ** k for k in range(1, int(math.log2(smax)) + 2)]
        labels = ["0", "1"] + [f"{a}–{b - 1}" for a, b in zip(edges[1:-1], edges[2:]) if b - a > 1]
    nb, nm = len(labels), len(counts)
    width = min(14.0, max(6.4, 0.1 * nb * (nm + 1.5), 0.55 * nb))
    fig, (ax,) = new_figure(ctx, width=width, height=3.8)
    pos, bw, entries = np.arange(nb), 0.8 / nm, []
    for j, (mi, frac) in enumerate(counts.items()):
        meth = ctx["methods"][mi]
        cum = np.concatenate([[0.0], np.cumsum(frac)])
        h = np.array([cum[min(b, len(frac))] - cum[min(a, len(frac))] for a, b in zip(edges[:-1], edges[1:])])
        c = ax.bar(pos - 0.4 + bw * (j + 0.5), h, bw, color=meth["color"], label=meth["label"], zorder=3)
        tag(c, "bar", proxy(meth, line=False), x=_jsonable(pos - 0.4 + bw * (j + 0.5)))
        entries.append((Patch(facecolor=meth["color"]), meth["label"]))
    ax.set_xticks(pos)
    rot = max(map(len, labels)) * nb > width * 9
    ax.set_xticklabels(labels, rotation=35 if rot else 0, ha="right" if rot else "center",
                       rotation_mode="anchor")
    ax.set_xlim(-0.6, nb - 0.4)
    ax.grid(axis="x", visible=False)
    ax.set_xlabel("staleness of an applied update (model versions)" + (", logarithmic bins" if smax > 15 else ""))
    ax.set_ylabel("fraction of applied updates")
    ax.set_ylim(0, None)
    ax.hg_extra = {"bins": labels}
    fig_legend(fig, entries, width)
    return fig


def chart_sim_vs_real(ctx):
    """One panel per method (small multiples sharing both axes): its measured curve and the
    simulator's prediction, so each pair can be compared without the others' lines between."""
    if ctx["axis"] != "real":
        return None
    metric, logy = ctx["metric"], wants_log(ctx, ctx["metric"])
    pairs = []
    for mi, meth in enumerate(ctx["methods"]):
        pred = [curve(ctx, r, metric, predicted=True) for r in meth["runs"]]
        if any(pred):
            pairs.append((mi, meth, pred))
    if not pairs:
        return None
    ncols = min(4, len(pairs))
    nrows = math.ceil(len(pairs) / ncols)
    fig, axes = new_figure(ctx, ncols=ncols, nrows=nrows, width=3.3 * ncols + 0.6, height=2.6 * nrows + 0.9,
                           sharex=True, sharey=True)
    target = None
    for k, (ax, (mi, meth, pred)) in enumerate(zip(axes, pairs)):
        draw_mean(ax, ctx, meth, mi, [curve(ctx, r, metric) for r in meth["runs"]], logy,
                  label=f"{meth['label']} (measured)", band=False)
        draw_mean(ax, ctx, meth, mi, pred, logy, label=f"{meth['label']} (predicted)", band=False,
                  linestyle="--", markerfacecolor="white")
        target = draw_target(ax, ctx, logy) or target
        ax.set_title(clean(meth["label"]), fontsize=9, color=meth["color"])
        finish_axes(ax, ctx, metric, logy, True)
        if k + ncols < len(pairs):      # a panel below carries the time axis
            ax.set_xlabel("")
        else:
            ax.xaxis.set_tick_params(labelbottom=True)
        if not ax.get_subplotspec().is_first_col():
            ax.set_ylabel("")
    for ax in axes[len(pairs):]:
        ax.set_visible(False)
    entries = [(Line2D([], [], color="0.2"), "measured"),
               (Line2D([], [], color="0.2", linestyle="--"), "predicted by the simulator")]
    entries += [target] if target else []
    fig_legend(fig, entries, fig.get_figwidth())
    return fig


def chart_tuning(ctx):
    tun = ctx["tuning"]
    if not tun or not isinstance(tun.get("methods"), list):
        return None
    crit = tun.get("criterion")
    keys = [str(k) for k in tun.get("keys", []) if isinstance(k, str)] if isinstance(tun.get("keys"), list) else []
    by_label = {m["raw"]: m for m in ctx["methods"]}
    todo = []
    for i, tm in enumerate(tun["methods"]):
        if not isinstance(tm, dict) or not isinstance(tm.get("candidates"), list):
            continue
        cands = [c for c in tm["candidates"] if isinstance(c, dict) and isinstance(c.get("setting"), dict)]
        raw = str(tm.get("label", f"method {i + 1}"))
        k = len(ctx["methods"]) + i
        meth = by_label.get(raw, {"label": clean(raw), "color": PALETTE[k % 8], "marker": MARKERS[k % 10]})
        if cands:
            todo.append((meth, cands, tm.get("chosen") if isinstance(tm.get("chosen"), dict) else {}))
    if not todo:
        return None

    def score(c):
        """(mean, ci95); mean NaN when none, or when it measures something other than the
        criterion (the driver ranks unreached candidates by their final metric)."""
        s = c.get("score")
        mean = s.get("mean") if isinstance(s, dict) else None
        if isinstance(s, dict) and crit and s.get("of") not in (None, crit):
            mean = None
        ci = s.get("ci95") if isinstance(s, dict) else None
        return (float(mean) if is_num(mean) and math.isfinite(mean) else math.nan,
                float(ci) if is_num(ci) and math.isfinite(ci) else 0.0)
    allm = np.array([score(c)[0] for _, cands, _ in todo for c in cands])
    fin = allm[np.isfinite(allm)]
    logy = len(fin) > 0 and fin.min() > 0 and fin.max() / fin.min() > 100
    ncols = min(3, len(todo))
    nrows = math.ceil(len(todo) / ncols)
    fig, axes = new_figure(ctx, ncols=ncols, nrows=nrows, width=4.3 * ncols, height=3.3 * nrows + 0.6, sharey=True)
    flags = set()
    # A setting whose score is beyond 10^4 times the best diverged: drawn as an x, so that the
    # axis shows the settings worth reading.
    cap = fin.min() * 1e4 if logy else math.inf

    def capped(c):
        mean, ci = score(c)
        return (math.nan, 0.0) if mean > cap else (mean, ci)

    for ax, (meth, cands, chosen) in zip(axes, todo):
        allkeys = keys + sorted({k for c in cands for k in c["setting"] if k not in keys})
        vary = [k for k in allkeys if len({json.dumps(c["setting"].get(k), sort_keys=True) for c in cands}) > 1]
        vary = vary or [k for k in allkeys if any(k in c["setting"] for c in cands)]
        numeric_keys = [k for k in vary if all(is_num(c["setting"].get(k)) for c in cands)]
        # x: the step size when it is swept, else the numeric key with the most values; each
        # combination of the other keys is a line of its own (shades of the method's colour).
        xkey = ("optimizer.lr" if "optimizer.lr" in numeric_keys else
                max(numeric_keys, key=lambda k: len({c["setting"][k] for c in cands})) if numeric_keys else None)
        numeric = xkey is not None
        rest = [k for k in vary if k != xkey] if numeric else []
        groups = {}
        for c in cands:
            gk = tuple(json.dumps(c["setting"].get(k), sort_keys=True) for k in rest)
            groups.setdefault(gk, []).append(c)

        def group_order(gk):
            return [(0, float(v)) if is_num(json.loads(v)) else (1, v) for v in gk]

        shades = np.linspace(0.0, 0.6, max(1, len(groups)))
        for g_i, gk in enumerate(sorted(groups, key=group_order)):
            gc = groups[gk]
            colour = meth["color"]
            if len(groups) > 1:
                rgb = np.array(matplotlib.colors.to_rgb(colour))
                colour = tuple(rgb + (1 - rgb) * shades[g_i])
            glabel = meth["label"] if not rest else clean(
                meth["label"] + " " + ", ".join(f"{k}={fmt_num(json.loads(v)) if is_num(json.loads(v)) else json.loads(v)}"
                                               for k, v in zip(rest, gk)), 60)
            if numeric:
                gc = sorted(gc, key=lambda c: c["setting"][xkey])
                x = np.array([float(c["setting"][xkey]) for c in gc])
            else:
                x = np.arange(len(gc), dtype=float)
            m, ci = (np.array(v) for v in zip(*[capped(c) for c in gc]))
            ok = np.isfinite(m)
            reached = [c.get("reached") if is_num(c.get("reached")) else None for c in gc]
            seeds = [c.get("seeds") if is_num(c.get("seeds")) else None for c in gc]
            partial = np.array([crit == "time_to_target" and r is not None and s is not None and r < s
                                for r, s in zip(reached, seeds)]) & ok
            is_chosen = np.array([bool(chosen) and all(c["setting"].get(k) == chosen.get(k) for k in vary if k in chosen)
                                  for c in gc])
            if ok.any():
                eb = ax.errorbar(x[ok], m[ok], yerr=ci[ok], color=colour, marker=meth["marker"],
                                 linestyle="-" if numeric else "none", capsize=3, linewidth=1.2, zorder=3,
                                 label=glabel)
                tag(eb, "errorbar", x=_jsonable(x[ok]), y=_jsonable(m[ok]), ci95=_jsonable(ci[ok]))
            if partial.any():
                tag(ax.plot(x[partial], m[partial], linestyle="none", marker=meth["marker"], markersize=6,
                            markerfacecolor="white", markeredgecolor=colour, zorder=4,
                            label="reached by some seeds only")[0], "line")
                flags.add("partial")
            blend = transforms.blended_transform_factory(ax.transData, ax.transAxes)
            if (~ok).any():
                tag(ax.plot(x[~ok], np.full((~ok).sum(), 0.95), linestyle="none", marker="x", color=colour,
                            markersize=7, transform=blend, zorder=4, label="no score")[0], "line")
                flags.add("none")
            if is_chosen.any():
                cy = np.where(ok, m, np.nan)[is_chosen]
                tag(ax.plot(x[is_chosen][np.isfinite(cy)], cy[np.isfinite(cy)], linestyle="none", marker="o",
                            markersize=14, markerfacecolor="none", markeredgecolor="black", markeredgewidth=1.6,
                            zorder=5, label="chosen")[0], "line")
                flags.add("chosen")
        if len(groups) > 1:
            ax.legend(fontsize=6, loc="lower left", framealpha=0.8,
                      handles=[h for h, l in zip(*ax.get_legend_handles_labels()) if l not in
                               ("chosen", "no score", "reached by some seeds only")])
        if not numeric:
            cands = [c for gk in sorted(groups, key=group_order) for c in groups[gk]]
            x = np.arange(len(cands), dtype=float)
        else:
            x = np.array([float(c["setting"][xkey]) for c in cands])
            vary = [xkey]
        ax.set_title(meth["label"])
        if numeric:
            ax.set_xlabel(clean(vary[0], 60))
            if x.min() > 0 and x.max() / x.min() > 10:
                set_log(ax, "x")
            values = np.unique(x)
            if len(values) <= 8:   # few settings: tick exactly the swept values
                ax.set_xticks(values, [fmt_num(float(v)) for v in values])
                ax.xaxis.set_minor_formatter(ticker.NullFormatter())
                ax.xaxis.set_minor_locator(ticker.NullLocator())
        else:
            ticks = [clean(", ".join(fmt_num(c["setting"].get(k)) if is_num(c["setting"].get(k))
                                     else clean(c["setting"].get(k), 20) for k in vary), 40) for c in cands]
            rot = len(cands) > 4 or max(map(len, ticks)) > 8
            ax.set_xticks(x, ticks, rotation=45 if rot else 0, ha="right" if rot else "center", fontsize=8)
            ax.set_xlabel(clean(", ".join(vary), 80))
            ax.grid(axis="x", visible=False)
            ax.set_xlim(-0.6, len(cands) - 0.4)
        if logy:
            set_log(ax)
    for ax in axes[len(todo):]:
        fig.delaxes(ax)
    if len(fin):   # explicit: autoscale on log axes with error bars reaching <= 0 hid the best scores
        ax = axes[0]
        lo, hi = fin.min(), min(fin.max(), cap)
        if logy:
            ax.set_ylim(lo / 6, hi * 6)
        else:
            pad = 0.08 * (hi - lo) if hi > lo else max(abs(hi) * 0.1, 1e-9)
            ax.set_ylim(lo - pad, hi + pad)
    unit = TIME_UNIT[ctx["axis"]]
    ylabel = (f"time to target ({unit})" if crit == "time_to_target"
              else f"final {metric_label(ctx['metric'])}" if crit == "final" else "score")
    for k, ax in enumerate(axes[:len(todo)]):
        ax.set_ylabel(ylabel if k % ncols == 0 else "")
    entries = []
    if "chosen" in flags:
        entries.append((Line2D([], [], linestyle="none", marker="o", markersize=11, markerfacecolor="none",
                               markeredgecolor="black", markeredgewidth=1.6), "chosen setting"))
    if "partial" in flags:
        entries.append((Line2D([], [], linestyle="none", marker="o", markerfacecolor="white",
                               markeredgecolor="0.3"), "target reached by some seeds only"))
    if "none" in flags:
        entries.append((Line2D([], [], linestyle="none", marker="x", color="0.3"),
                        "target not reached" if crit == "time_to_target" else "diverged (no finite score, or 10^4 x the best)"))
    cap = Line2D([], [], color="0.3", marker="_", markersize=7, linestyle="none")
    eb = ErrorbarContainer((Line2D([], [], color="0.3", marker="o", linestyle="none"), (cap, cap),
                            (LineCollection([], colors="0.3"),)), has_yerr=True)
    entries.append((eb, "mean ± 95% CI over seeds"))
    fig_legend(fig, entries, fig.get_figwidth())
    return fig


CHARTS = [("metric", chart_metric), ("utilisation", chart_utilisation), ("staleness", chart_staleness),
          ("sim_vs_real", chart_sim_vs_real), ("tuning", chart_tuning)]


# ----------------------------------------------------------------------------- output
def atomic_write(out, name, write):
    """Write via a temporary file in out, renamed into place; no partial file on failure."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~UMASK)   # mkstemp's 0600 would hide the charts from others
        os.replace(tmp, os.path.join(out, name))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def main(argv=None):
    p = argparse.ArgumentParser(prog="heterograd_plot.py", description="Draw the charts of a heterograd-run folder.")
    p.add_argument("root", help="output folder of heterograd-run (holds runs.json)")
    p.add_argument("--out", help="folder for the charts (default ROOT)")
    p.add_argument("--format", choices=["png", "pdf", "svg"], default="png")
    a = p.parse_args(argv)
    out = a.out or a.root
    try:
        ctx = load_manifest(a.root)
        os.makedirs(out, exist_ok=True)
    except ManifestError as e:
        print(f"heterograd_plot: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"heterograd_plot: error: {out}: cannot create the output folder: {e}", file=sys.stderr)
        return 2
    meta = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}.get(a.format, {})
    described, failed = [], 0
    for name, draw in CHARTS:
        file = f"{name}.{a.format}"
        try:
            fig = draw(ctx)
            if fig is None:
                continue
            atomic_write(out, file, lambda tmp: fig.savefig(tmp, format=a.format, bbox_inches="tight",
                                                            pad_inches=0.05, metadata=meta))
            described.append(describe(fig, file))
            print(f"chart: {os.path.join(out, file)}", flush=True)
        except Exception as e:  # one chart failing must not stop the others
            failed += 1
            if isinstance(e, OSError):  # heterograd-run names the file from this line
                print(f"heterograd_plot: cannot write {os.path.join(out, file)}: {e.strerror or e}",
                      file=sys.stderr, flush=True)
            warn(f"{file}: failed: {e!r}\n{traceback.format_exc()}")
        finally:
            plt.close("all")
    # charts.json: what was drawn; charts it listed before and not redrawn now are stale.
    try:
        with open(os.path.join(out, "charts.json"), encoding="utf-8") as f:
            before = {e.get("file") for e in json.load(f) if isinstance(e, dict)}
    except (OSError, ValueError, TypeError, AttributeError):
        before = set()
    for stale in before - {d["file"] for d in described}:
        if stale in {f"{n}.{a.format}" for n in CHART_NAMES} and os.path.isfile(os.path.join(out, stale)):
            os.unlink(os.path.join(out, stale))

    def dump(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(described, f, indent=1, ensure_ascii=False, allow_nan=False)
    try:
        atomic_write(out, "charts.json", dump)
    except (OSError, ValueError) as e:
        failed += 1
        if isinstance(e, OSError):
            print(f"heterograd_plot: cannot write {os.path.join(out, 'charts.json')}: {e.strerror or e}",
                  file=sys.stderr, flush=True)
        warn(f"charts.json: failed: {e!r}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
