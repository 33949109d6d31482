#!/usr/bin/env python3
"""heterograd.optim's step against torch.optim's, in one process (./hg bench python).

    python_bench.py OUT.json [--threads=LIST] [--quick]

Layouts: one tensor of 1M and of 16M float32 elements, and ResNet-8's parameter list (29
tensors, 77,754 parameters: heterograd/torch/models.hpp's resnet8 at width 16 on 28x28x1).
Optimizers: SGD (lr only), SGD with momentum 0.9, Adam. Variants, each on its own copy of the
parameters with gradients set once: heterograd per-tensor (flat=False), heterograd flat
(flat=True), torch.optim with foreach=False, foreach=True and, where the installed PyTorch has
it for CPU tensors, fused=True. Every step runs all variants back to back in an order that
rotates step by step, so that all see the same machine load; per variant the median step time,
and per pair the median over steps of the per-step ratio torch time / heterograd time (> 1:
heterograd is faster). Threads: PyTorch's and heterograd's OpenMP are set together
(torch.set_num_threads), for each count of --threads (default 1 and 2).

Writes a Google-Benchmark-shaped JSON (bench/report.py reads it; bench/targets/python.py prints
the ratios) and prints a table.
"""
import json
import os
import statistics
import sys
import time

import torch

import heterograd
import heterograd._core as core
import heterograd.optim as hgo


def resnet8_shapes():
    """The parameter shapes of resnet8() (heterograd/torch/models.hpp), in its order."""
    shapes = [(16, 1, 3, 3), (16,), (16,)]
    c = 16
    for k in range(3):
        out = 16 if k == 0 else 2 * c
        shapes += [(out, c, 3, 3), (out,), (out,), (out, out, 3, 3), (out,), (out,)]
        if k:
            shapes += [(out, c, 1, 1), (out,), (out,)]
        c = out
    return shapes + [(10, 64), (10,)]


LAYOUTS = {"1M": [(1 << 20,)], "16M": [(16 << 20,)], "resnet8": resnet8_shapes()}
SETTINGS = {"sgd": dict(lr=1e-3), "momentum": dict(lr=1e-3, momentum=0.9), "adam": dict(lr=1e-4)}


def make(variant, kind, params):
    s = SETTINGS[kind]
    if variant.startswith("hg_"):
        cls = hgo.Adam if kind == "adam" else hgo.SGD
        return cls(params, flat=variant == "hg_flat", **s)
    cls = torch.optim.Adam if kind == "adam" else torch.optim.SGD
    extra = {"torch_single": dict(foreach=False), "torch_foreach": dict(foreach=True),
             "torch_fused": dict(fused=True)}[variant]
    return cls(params, **s, **extra)


def fresh(shapes):
    params = [torch.nn.Parameter(torch.full(s, 0.5)) for s in shapes]
    for p in params:
        p.grad = torch.full_like(p, 0.25)
    return params


def variants_for(kind, shapes):
    """{variant: optimizer}, each over its own parameters; fused only where it runs on CPU."""
    out = {}
    for v in ("hg_tensors", "hg_flat", "torch_single", "torch_foreach", "torch_fused"):
        try:
            opt = make(v, kind, fresh(shapes))
            opt.step()  # makes the state; a variant this PyTorch lacks fails here
        except (TypeError, RuntimeError, ValueError) as e:
            if v != "torch_fused":
                raise
            print(f"  ({kind}: torch fused=True unavailable here: {str(e).splitlines()[0][:70]})")
            continue
        out[v] = opt
    return out


def side_by_side(opts, steps):
    names = list(opts)
    times = {n: [] for n in names}
    for i in range(steps):
        order = names[i % len(names):] + names[:i % len(names)]
        for n in order:
            t0 = time.perf_counter()
            opts[n].step()
            times[n].append(time.perf_counter() - t0)
    result = {f"{n}_ms": statistics.median(t) * 1e3 for n, t in times.items()}
    for t in (n for n in names if n.startswith("torch_")):
        for h in ("hg_tensors", "hg_flat"):
            ratios = [a / b for a, b in zip(times[t], times[h])]
            result[f"{t}_over_{h}"] = statistics.median(ratios)
    return result


def main(argv):
    out = argv[0]
    threads = [1, 2]
    quick = "--quick" in argv
    for a in argv[1:]:
        if a.startswith("--threads="):
            threads = [int(x) for x in a.split("=", 1)[1].split(",")]
    benchmarks = []
    for t in threads:
        torch.set_num_threads(t)
        assert core.num_threads() == t, "PyTorch and heterograd must share OpenMP's thread count"
        for layout, shapes in LAYOUTS.items():
            n = sum(torch.Size(s).numel() for s in shapes)
            steps = (8 if quick else 30) if n >= (16 << 20) else (40 if quick else 200)
            for kind in SETTINGS:
                r = side_by_side(variants_for(kind, shapes), steps)
                name = f"BM_python_{kind}/layout:{layout}/threads:{t}"
                benchmarks.append(dict(name=name, run_type="iteration", parameters=n,
                                       tensors=len(shapes), steps=steps, **r))
                print(name, " ".join(f"{k}={v:.3g}" for k, v in r.items()), flush=True)
    context = dict(torch=torch.__version__, heterograd=heterograd.__version__,
                   backend=core.backend, threads=threads, host_name=os.uname().nodename,
                   date=time.strftime("%Y-%m-%d %H:%M:%S"))
    with open(out, "w") as f:
        json.dump({"context": context, "benchmarks": benchmarks}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
