#!/usr/bin/env python3
"""Local SGD / DiLoCo across MPI processes with per-rank batch sizes (heterograd.distributed).

    mpirun -np 3 python examples/python/local_sgd.py                  # DiLoCo, H = 8
    mpirun -np 3 python examples/python/local_sgd.py --outer none     # local SGD (FedAvg)
    mpirun -np 3 python examples/python/local_sgd.py --tiny           # the tests' size

Each rank trains a small MLP with its own torch.optim.AdamW (DiLoCo's inner optimizer) on its
own batches; the ranks stand for mixed hardware, so rank i takes a batch of `--batch` * (i + 1)
samples per step (16, 32, 48 by default) and weighs its model by its batch size in every
round's average.
Every `--local-steps` inner steps the ranks average (LocalSGD.step closes the round), and with
`--outer diloco` the average is handed to DiLoCo's outer Nesterov step (Douillard et al.,
"DiLoCo: Distributed Low-Communication Training of Language Models", 2023). The data are
synthetic: four classes labelled by a fixed random teacher network on Gaussian inputs, drawn
from seeds (no download). Every rank prints its loss and accuracy on the same held-out set
before and after; `--json PREFIX` writes each rank's numbers to PREFIX.<rank>.json (the tests
read them).
"""

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import heterograd.distributed as hgd

INPUTS, CLASSES = 16, 4


def teacher() -> nn.Module:
    torch.manual_seed(4321)
    return nn.Sequential(nn.Linear(INPUTS, 32), nn.Tanh(), nn.Linear(32, CLASSES))


def sample(net: nn.Module, n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, INPUTS, generator=g)
    with torch.no_grad():
        return x, net(x).argmax(1)


def evaluate(model: nn.Module, data) -> dict:
    x, y = data
    with torch.no_grad():
        out = model(x)
        return {"loss": F.cross_entropy(out, y).item(), "accuracy": (out.argmax(1) == y).float().mean().item()}


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="the tests' size: 30 rounds of H = 4, 512 held out")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--local-steps", type=int, default=8, help="H: inner steps per round")
    ap.add_argument("--batch", type=int, default=16, help="rank i's batch is this times i + 1")
    ap.add_argument("--lr", type=float, default=0.003, help="the inner AdamW step")
    ap.add_argument("--outer", default="diloco", choices=["none", "diloco", "fedavgm", "sgd"])
    ap.add_argument("--json", default="", help="write PREFIX.<rank>.json")
    a = ap.parse_args()
    if a.tiny:
        a.rounds, a.local_steps = 30, 4
    return a


def main():
    a = parse()
    torch.set_num_threads(1)  # ranks share the machine's cores
    net = teacher()
    held_out = sample(net, 512 if a.tiny else 4000, seed=999)
    torch.manual_seed(0)  # every rank starts from rank 0's model anyway (LocalSGD broadcasts it)
    model = nn.Sequential(nn.Linear(INPUTS, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    before = evaluate(model, held_out)
    t0 = time.perf_counter()
    outer = None if a.outer == "none" else a.outer
    with hgd.LocalSGD(model, opt, local_steps=a.local_steps, outer=outer, timeout=60.0,
                      weight=a.batch) as ls:
        batch = a.batch * (ls.rank + 1)
        ls.set_weight(batch)  # this rank's share of every average: its batch size
        for step in range(a.rounds * a.local_steps):
            x, y = sample(net, batch, seed=1_000_000 * (ls.rank + 1) + step)
            ls.zero_grad()
            F.cross_entropy(model(x), y).backward()
            ls.step()  # opt.step(); every H-th closes the round
        out = {"rank": ls.rank, "batch": batch, "steps": ls.steps, "rounds": ls.rounds,
               "local_steps": a.local_steps, "outer": a.outer, "hash": ls.model_hash()}
    out["wall_s"] = time.perf_counter() - t0
    out["before"], out["after"] = before, evaluate(model, held_out)
    print(f"rank {out['rank']} (batch {batch}): loss {before['loss']:.4f} -> {out['after']['loss']:.4f}, "
          f"accuracy {before['accuracy']:.3f} -> {out['after']['accuracy']:.3f}, {out['rounds']} rounds "
          f"of H = {a.local_steps} ({a.outer}) in {out['wall_s']:.2f} s, model {out['hash']:016x}")
    if a.json:
        with open(f"{a.json}.{out['rank']}.json", "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
