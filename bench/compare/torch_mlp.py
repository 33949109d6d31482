#!/usr/bin/env python3
"""PyTorch's time per training step for the models of bench/models_bench.cpp.

    torch_mlp.py OUT.json [--threads=LIST]

Fashion-MNIST from Debian's dataset-fashion-mnist (read with gzip + numpy, scaled to [0,1]),
batch 64, torch.optim.Adam(lr=1e-3), a 784-256-128-10 MLP (Linear+ReLU) and softmax
regression, at the thread counts of the models suite's run (torch.set_num_threads; see
bench_threads.py: --threads=LIST here, else those recorded in the suite's JSON next to OUT,
else 1, 2, 4, ... up to the cores). Writes seconds per step and per
epoch (60000/64 steps) for each, measured over a fixed number of steps after a warm-up.
"""
import gzip
import json
import os
import sys
import time

import numpy as np
import torch

from bench_threads import threads as thread_counts

DIR = os.environ.get("HG_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def load_images(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    n, rows, cols = (int.from_bytes(raw[i:i + 4], "big") for i in (4, 8, 12))
    return np.frombuffer(raw, np.uint8, offset=16).reshape(n, rows * cols).astype(np.float32) / 255.0


def load_labels(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    return np.frombuffer(raw, np.uint8, offset=8).astype(np.int64)


def time_model(sizes, x, y, threads, steps=300, warmup=30, batch=64):
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    perm = torch.randperm(x.shape[0], generator=g)

    def step(k):
        idx = perm[(k * batch) % (x.shape[0] - batch):][:batch]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()

    for k in range(warmup):
        step(k)
    t0 = time.perf_counter()
    for k in range(steps):
        step(warmup + k)
    per_step = (time.perf_counter() - t0) / steps
    return {"seconds_per_step": per_step, "epoch_seconds": per_step * (x.shape[0] // batch)}


def main():
    args = sys.argv[1:]
    usage = "usage: torch_mlp.py OUT.json [--threads=LIST]"
    if not args:
        sys.exit(usage)
    thread_list = thread_counts(args, args[0])
    if len(args) != 1:
        sys.exit(usage)
    out = args[0]
    x = torch.from_numpy(load_images(os.path.join(DIR, "train-images-idx3-ubyte.gz")))
    y = torch.from_numpy(load_labels(os.path.join(DIR, "train-labels-idx1-ubyte.gz")))
    res = {"torch_version": torch.__version__}
    for name, sizes in (("mlp_784_256_128_10", [784, 256, 128, 10]),
                        ("softmax_regression", [784, 10])):
        for t in thread_list:
            r = time_model(sizes, x, y, t)
            res[f"{name}/{t}"] = r
            print(f"torch {name} threads={t}: {r['seconds_per_step']*1e3:.3f} ms/step, "
                  f"{r['epoch_seconds']:.2f} s/epoch")
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
