#!/usr/bin/env python3
"""PyTorch's own CPU optimizer steps against heterograd's fused kernels, side by side.

    torch_optim.py OUT.json LIBHG_KERNELS_CAPI.so [--threads=LIST]

16M-element float32 parameters, at the thread counts of the kernels suite's run (its
--threads; bench_threads.py: --threads=LIST here, else those recorded in the suite's JSON
next to OUT, else 1, 2, 4, ... up to the cores): SGD (lr only), SGD with momentum 0.9 and
Adam, each with foreach=False (PyTorch's per-tensor for-loop) and foreach=True (its
multi-tensor path), on one 16M tensor; Adam also on the 200 mixed-size tensors of the
multi-tensor benchmark. heterograd's kernels (loaded through ctypes from the benchmark-only C
interface bench/kernels_capi.cpp) update their own torch-allocated buffers of the same sizes,
in the same process, interleaved step by step with PyTorch's (the order alternating), so both
see the same machine load. Per variant: best and median step times (ms) of each, and the
median over steps of the per-step ratio PyTorch time / heterograd time, which
bench/targets/kernels.py reports against the issue's targets.
"""
import ctypes
import json
import statistics
import sys
import time

import torch

from bench_threads import threads as thread_counts

N = 16 << 20
c_float_p = ctypes.POINTER(ctypes.c_float)


def mixed_sizes():
    # The same generator as mixed_sizes() in bench/kernels_bench.cpp.
    x, total, sizes = 12345, 0, []
    mask = (1 << 64) - 1
    for _ in range(199):
        x = (x * 6364136223846793005 + 1442695040888963407) & mask
        n = 1000 + (x >> 33) % 160000
        sizes.append(n)
        total += n
    sizes.append(N - total)
    return sizes


def load(path):
    lib = ctypes.CDLL(path)
    sz, dbl, i64 = ctypes.c_size_t, ctypes.c_double, ctypes.c_int64
    lib.hg_capi_set_threads.argtypes = [ctypes.c_int]
    lib.hg_capi_sgd.argtypes = [c_float_p, c_float_p, sz, dbl, dbl]
    lib.hg_capi_momentum.argtypes = [c_float_p, c_float_p, c_float_p, sz, dbl, dbl, dbl, dbl,
                                     ctypes.c_int]
    lib.hg_capi_adam.argtypes = [c_float_p, c_float_p, c_float_p, c_float_p, sz, dbl, dbl, dbl,
                                 dbl, dbl, i64]
    pp = ctypes.POINTER(c_float_p)
    lib.hg_capi_multi_adam.argtypes = [pp, pp, pp, pp, ctypes.POINTER(sz), sz, dbl, dbl, dbl,
                                       dbl, dbl, i64]
    return lib


def ptr(t):
    return ctypes.cast(t.data_ptr(), c_float_p)


def make_torch(kind, params, foreach):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=1e-3, foreach=foreach)
    if kind == "momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=foreach)
    return torch.optim.Adam(params, lr=1e-4, foreach=foreach)


def make_hg(lib, kind, sizes):
    """A closure doing one heterograd step of `kind` over fresh buffers of `sizes`."""
    p = [torch.full((n,), 0.5) for n in sizes]
    g = [torch.full((n,), 0.25) for n in sizes]
    m = [torch.zeros(n) for n in sizes]
    v = [torch.zeros(n) for n in sizes]
    # The closures below hold raw pointers only: `state` keeps the tensors alive with them.
    state = {"step": 0, "keep": (p, g, m, v)}
    if len(sizes) == 1:
        P, G, M, V = ptr(p[0]), ptr(g[0]), ptr(m[0]), ptr(v[0])
        n = sizes[0]

        def step():
            state["step"] += 1
            if kind == "sgd":
                lib.hg_capi_sgd(P, G, n, 1e-3 if state["step"] % 2 else -1e-3, 0.0)
            elif kind == "momentum":
                lib.hg_capi_momentum(P, G, M, n, 1e-3, 0.9, 0.0, 0.0, 0)
            else:
                lib.hg_capi_adam(P, G, M, V, n, 1e-4, 0.9, 0.999, 1e-8, 0.0, state["step"])
        return step
    assert kind == "adam"
    arr = lambda ts: (c_float_p * len(ts))(*[ptr(t) for t in ts])
    P, G, M, V = arr(p), arr(g), arr(m), arr(v)
    ns = (ctypes.c_size_t * len(sizes))(*sizes)

    def multi_adam():
        state["step"] += 1
        lib.hg_capi_multi_adam(P, G, M, V, ns, len(sizes), 1e-4, 0.9, 0.999, 1e-8, 0.0,
                               state["step"])
    multi_adam.keep = (P, G, M, V, ns)
    return multi_adam


def side_by_side(opt, hg_step, steps):
    opt.step()  # creates PyTorch's state buffers
    hg_step()
    tt, th, ratio = [], [], []
    for i in range(steps):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        t = [0.0, 0.0]
        for which in order:
            t0 = time.perf_counter()
            if which == 0:
                opt.step()
            else:
                hg_step()
            t[which] = (time.perf_counter() - t0) * 1e3
        tt.append(t[0])
        th.append(t[1])
        ratio.append(t[0] / t[1])
    return {"torch_best_ms": min(tt), "torch_median_ms": statistics.median(tt),
            "hg_best_ms": min(th), "hg_median_ms": statistics.median(th),
            "torch_over_hg": statistics.median(ratio)}


def main(out, lib_path, thread_list):
    lib = load(lib_path)
    results = {}
    for threads in thread_list:
        torch.set_num_threads(threads)
        lib.hg_capi_set_threads(threads)
        for layout in ("one", "multi200"):
            sizes = [N] if layout == "one" else mixed_sizes()
            kinds = ("sgd", "momentum", "adam") if layout == "one" else ("adam",)
            params = [torch.nn.Parameter(torch.full((n,), 0.5)) for n in sizes]
            for p in params:
                p.grad = torch.full_like(p, 0.25)
            for kind in kinds:
                for foreach in (False, True):
                    opt = make_torch(kind, params, foreach)
                    hg_step = make_hg(lib, kind, sizes)
                    r = side_by_side(opt, hg_step, 25 if kind == "adam" else 60)
                    key = f"{kind}/{threads}/{layout}/{'foreach' if foreach else 'forloop'}"
                    results[key] = r
                    print(f"torch {key:30s} {r['torch_best_ms']:8.2f} ms  heterograd "
                          f"{r['hg_best_ms']:7.2f} ms (best)  torch/heterograd "
                          f"{r['torch_over_hg']:6.2f} (median of per-step ratios)", flush=True)
                    del opt, hg_step
            del params
    with open(out, "w") as f:
        json.dump({"torch_version": torch.__version__, "elements": N, "results": results}, f,
                  indent=1)


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit("usage: torch_optim.py OUT.json LIBHG_KERNELS_CAPI.so [--threads=LIST]")
    tl = thread_counts(args, args[0])
    if len(args) != 2:
        sys.exit("usage: torch_optim.py OUT.json LIBHG_KERNELS_CAPI.so [--threads=LIST]")
    main(args[0], args[1], tl)
