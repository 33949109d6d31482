"""Run by test_distributed_mpi.py under `mpirun -np 3`: heterograd.distributed's loop on a
linear model, in the ways a user writes it. Rank 1 uses step() and lets zero_grad() set the
gradients to None (push copies them into place) and leaves the loop after 5 jobs (its
__exit__ waits for the stop); rank 2 pushes until the end. A Python thread counts while rank 0
is inside serve(): it can only count if the GIL was released. Then every server method runs
20 updates with its default parameters. Each rank writes <prefix>.<rank>.json."""

import json
import sys
import threading
import time

import torch

import heterograd.distributed as hgd

prefix = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
ptrs = None
ticks = []
done = threading.Event()


def count():
    while not done.is_set():
        ticks.append(time.perf_counter())
        time.sleep(0.001)


threading.Thread(target=count, daemon=True).start()
jobs = 0
stable = True
ticks_served = serve_s = None
with hgd.ParameterServer(model, method="asgd", lr=0.05, max_updates=60, timeout=60.0) as ps:
    if ps.served:  # rank 0: the ticks counted while serve() ran in __enter__
        ticks_served = sum(ps.served[0] < t < ps.served[1] for t in ticks)
        serve_s = ps.served[1] - ps.served[0]
    ptrs = [p.data_ptr() for p in model.parameters()]
    more = ps.pull()
    while more:
        stable &= ptrs == [p.data_ptr() for p in model.parameters()]
        x = torch.randn(16, 8)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        jobs += 1
        if ps.rank == 1:
            model.zero_grad()  # set_to_none: the next backward makes new .grad tensors
            loss.backward()
            if jobs == 5:
                break
            more = ps.step()
        else:
            loss.backward()
            if jobs == 1:
                time.sleep(0.05)  # the server waits meanwhile: serve() lasts >= 50 ms
            ps.push()
            more = ps.pull()
flat = ps.flat
inside = all(flat.data_ptr() <= p.data_ptr() < flat.data_ptr() + 4 * flat.numel() for p in model.parameters())
done.set()
methods = {}
for name, _, _ in hgd.methods():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 1)
    with hgd.ParameterServer(m, method=name, lr=0.01, max_updates=20, timeout=60.0) as q:
        while q.pull():
            x = torch.randn(8, 4)
            ((m(x) - x.sum(1, keepdim=True)) ** 2).mean().backward()
            q.push()
    methods[name] = {"hash": q.model_hash(), "summary": q.summary}
out = {"methods": methods, "rank": ps.rank, "jobs": jobs, "hash": ps.model_hash(), "stable": stable,
       "views": inside, "ticks_served": ticks_served, "serve_s": serve_s, "running": ps.running,
       "summary": ps.summary}
with open(f"{prefix}.{ps.rank}.json", "w") as f:
    json.dump(out, f)
