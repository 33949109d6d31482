#!/usr/bin/env python3
"""PyTorch's DistributedDataParallel (Gloo) on the LibTorch presets of bench/models_torch.cpp.

    torch_ddp.py OUT.json

Two processes on this machine (torch.multiprocessing, Gloo over localhost), one intra-op
thread each, LeNet-5 and ResNet-8 built as in heterograd/torch/models.hpp, batch 32 per rank
of standardised Fashion-MNIST (consecutive slices: rank r takes slice s*2 + r at step s, as the
heterograd benchmark does), torch.optim.SGD(lr=0.01, momentum=0.9); DDP averages the gradients
every step (data parallel: heterograd's local SGD with H = 1 does the same work). Samples per
second over a fixed number of steps (about 2 s) after a warm-up, both ranks synchronised by a barrier
around the timed part; then rank 0's test accuracy on the first 2000 test images (evaluation
mode) after all its samples, as hg-bench-models-torch-mpi reports it. Merges "ddp/lenet5" and
"ddp/resnet8" into OUT.json (the models suite's peers file, which torch_mlp.py writes first).
"""
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

from torch_mlp import DIR, load_images, load_labels

BATCH, RANKS, WARMUP = 32, 2, 16
STEPS = {"lenet5": 960, "resnet8": 96}  # about 2 s timed each (as hg-bench-models-torch-mpi)


def lenet5():
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (self.shortcut(x) if self.shortcut is not None else x))


def resnet8():
    return nn.Sequential(
        nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU()),
        Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2),
        nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()), nn.Linear(64, 10))


def worker(rank, preset, init_file, result_file):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=RANKS)
    x = torch.from_numpy(load_images(os.path.join(DIR, "train-images-idx3-ubyte.gz"))).view(-1, 1, 28, 28)
    x_mean, x_std = x.mean(), x.std()
    x = (x - x_mean) / x_std
    y = torch.from_numpy(load_labels(os.path.join(DIR, "train-labels-idx1-ubyte.gz")))
    torch.manual_seed(1)
    model = nn.parallel.DistributedDataParallel(lenet5() if preset == "lenet5" else resnet8())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    per = x.shape[0] // BATCH

    def step(s):
        k = ((s * RANKS + rank) % per) * BATCH
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x[k:k + BATCH]), y[k:k + BATCH]).backward()
        opt.step()

    for s in range(WARMUP):
        step(s)
    dist.barrier()
    t0 = time.perf_counter()
    for s in range(WARMUP, WARMUP + STEPS[preset]):
        step(s)
    dist.barrier()
    secs = time.perf_counter() - t0
    if rank == 0:
        # Test accuracy on the first 2000 test images (evaluation mode), after the same samples
        # as hg-bench-models-torch-mpi's figure.
        tx = torch.from_numpy(load_images(os.path.join(DIR, "t10k-images-idx3-ubyte.gz"))).view(-1, 1, 28, 28)
        tx = (tx - x_mean) / x_std
        ty = torch.from_numpy(load_labels(os.path.join(DIR, "t10k-labels-idx1-ubyte.gz")))
        model.eval()
        with torch.no_grad():
            acc = (model.module(tx[:2000]).argmax(1) == ty[:2000]).double().mean().item()
        with open(result_file, "w") as f:
            json.dump({"samples_per_second": RANKS * STEPS[preset] * BATCH / secs, "seconds": secs, "ranks": RANKS,
                       "batch": BATCH, "steps": STEPS[preset], "samples": RANKS * (WARMUP + STEPS[preset]) * BATCH,
                       "accuracy": acc}, f)
    dist.destroy_process_group()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: torch_ddp.py OUT.json")
    out = sys.argv[1]
    res = {}
    if os.path.exists(out):
        with open(out) as f:
            res = json.load(f)
    for preset in ("lenet5", "resnet8"):
        with tempfile.TemporaryDirectory() as d:
            init, result = os.path.join(d, "init"), os.path.join(d, "result.json")
            mp.spawn(worker, args=(preset, init, result), nprocs=RANKS, join=True)
            with open(result) as f:
                r = json.load(f)
        res[f"ddp/{preset}"] = r
        print(f"torch DDP gloo {preset}: {RANKS} ranks, {r['samples_per_second']:.0f} samples/s, "
              f"accuracy {r['accuracy']:.4f} after {r['samples']} samples")
    res["ddp_torch_version"] = torch.__version__
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
