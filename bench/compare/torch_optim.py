#!/usr/bin/env python3
"""PyTorch's own CPU optimizer steps on the sizes of bench/kernels_bench.cpp.

    torch_optim.py OUT.json

16M-element float32 parameters, 1 and 2 threads: SGD (lr only), SGD with momentum 0.9 and
Adam, each with foreach=False (the per-tensor for-loop) and foreach=True (multi-tensor
kernels), on one 16M tensor and on the 200 mixed-size tensors of the multi-tensor benchmark.
Writes the best and the median step time (ms) of each, with torch's version. The heterograd /
PyTorch ratios are printed by ./hg bench (bench/targets/kernels.py) from this file and the
heterograd run.
"""
import json
import statistics
import sys
import time

import torch

N = 16 << 20


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


def make(kind, params, foreach):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=1e-3, foreach=foreach)
    if kind == "momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=foreach)
    if kind == "adam":
        return torch.optim.Adam(params, lr=1e-4, foreach=foreach)
    raise ValueError(kind)


def time_steps(opt, steps):
    opt.step()  # creates the state buffers
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    return min(times), statistics.median(times)


def main(out):
    results = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for layout in ("one", "multi200"):
            sizes = [N] if layout == "one" else mixed_sizes()
            params = [torch.nn.Parameter(torch.full((n,), 0.5)) for n in sizes]
            for p in params:
                p.grad = torch.full_like(p, 0.25)
            for kind in ("sgd", "momentum", "adam"):
                for foreach in (False, True):
                    opt = make(kind, params, foreach)
                    best, median = time_steps(opt, 12 if kind == "adam" else 20)
                    key = f"{kind}/{threads}/{layout}/{'foreach' if foreach else 'forloop'}"
                    results[key] = {"best_ms": best, "median_ms": median}
                    print(f"torch {key:32s} best {best:8.2f} ms  median {median:8.2f} ms",
                          flush=True)
                    del opt
            del params
    with open(out, "w") as f:
        json.dump({"torch_version": torch.__version__, "elements": N, "results": results}, f,
                  indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out/bench/kernels-peers.json")
