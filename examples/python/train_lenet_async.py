#!/usr/bin/env python3
"""LeNet-5 trained by Ringmaster ASGD across MPI processes with heterograd.distributed.

    mpirun -np 3 python examples/python/train_lenet_async.py            # rank 0 serves, 2 workers
    mpirun -np 3 python examples/python/train_lenet_async.py --tiny     # the tests' size

Rank 0 runs the parameter server (Ringmaster ASGD: a gradient computed at a model `threshold`
or more versions old is discarded; SGD on the server); ranks 1 and 2 pull the model, compute a
minibatch gradient and push it. The last rank is slowed by a sleep per job, so its gradients
arrive late and the staleness histogram shows it. The data are synthetic (heterograd's
Fashion-MNIST reader is the C++ driver's and is not reachable from Python): ten classes of
28x28 images, each a fixed random prototype plus Gaussian noise, drawn from seeds, so that a run
needs no download. Every rank prints its loss and accuracy on the same held-out set before and
after; rank 0 prints the server's summary. `--json PREFIX` writes each rank's numbers to
PREFIX.<rank>.json (the tests read them).
"""

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import heterograd.distributed as hgd


class LeNet5(nn.Module):
    """LeCun et al., "Gradient-based learning applied to document recognition", Proc. IEEE
    1998, with ReLU and max pooling."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def prototypes(noise: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(12345)
    return torch.randn(10, 1, 28, 28, generator=g) * noise


def sample(protos: torch.Tensor, n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    x = protos[y] + torch.randn(n, 1, 28, 28, generator=g)
    return x, y


def evaluate(model: nn.Module, data) -> dict:
    x, y = data
    with torch.no_grad():
        out = model(x)
        return {"loss": F.cross_entropy(out, y).item(), "accuracy": (out.argmax(1) == y).float().mean().item()}


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true",
                    help="the tests' size: 250 updates of batch 16, 5 ms sleeps, 256 held out")
    ap.add_argument("--updates", type=int, default=1000, help="server updates (max_updates)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.1, help="the server's SGD step")
    ap.add_argument("--threshold", type=int, default=3, help="Ringmaster's R")
    ap.add_argument("--slow", type=float, default=0.05, help="seconds the last rank sleeps per job")
    ap.add_argument("--signal", type=float, default=1.0, help="the prototypes' scale (noise has 1)")
    ap.add_argument("--json", default="", help="write PREFIX.<rank>.json")
    a = ap.parse_args()
    if a.tiny:
        a.updates, a.batch, a.slow = 250, 16, 0.005
    return a


def main():
    a = parse()
    torch.set_num_threads(1)  # ranks share the machine's cores
    torch.manual_seed(0)      # rank 0's model is the server's initial model
    model = LeNet5()
    protos = prototypes(a.signal)
    held_out = sample(protos, 256 if a.tiny else 2000, seed=999)
    before = evaluate(model, held_out)
    jobs = pushed = 0
    t0 = time.perf_counter()
    with hgd.ParameterServer(model, method="ringmaster", lr=a.lr, max_updates=a.updates,
                             threshold=a.threshold, timeout=60.0) as ps:
        last = ps.size - 1
        while ps.pull():  # rank 0 served in __enter__: False at once there
            x, y = sample(protos, a.batch, seed=1000 * ps.rank + jobs)
            F.cross_entropy(model(x), y).backward()
            if ps.rank == last and a.slow > 0:
                time.sleep(a.slow)
            jobs += 1
            pushed += ps.push()
    wall = time.perf_counter() - t0
    after = evaluate(model, held_out)  # every rank holds the server's final model now
    out = {"rank": ps.rank, "before": before, "after": after, "jobs": jobs, "pushed": pushed,
           "hash": ps.model_hash(), "wall_s": wall}
    print(f"rank {ps.rank}: loss {before['loss']:.4f} -> {after['loss']:.4f}, accuracy "
          f"{before['accuracy']:.3f} -> {after['accuracy']:.3f}, {jobs} jobs, model {out['hash']:016x}")
    if ps.summary is not None:
        s = ps.summary
        out["summary"] = s
        print(f"server: {s['updates']} updates from {s['results']} results in {s['end_time']:.2f} s; "
              f"applied per worker {s['applied']}, discarded {s['discarded']}; applied delays "
              f"{s['staleness']['applied']} (histogram from 0; R = {a.threshold}); refused {s['refused']}")
    if a.json:
        with open(f"{a.json}.{ps.rank}.json", "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
