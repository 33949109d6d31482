#!/usr/bin/env python3
"""Peer (context only): torch.distributed all_reduce (sum) of floats over gloo, timed like
heterograd's benchmarks (each rank rewrites its tensor before every call; the slowest rank's
mean). Usage: comm_gloo.py RANKS PORT. Prints one JSON object per size."""
import json
import os
import sys
import time


def worker(rank, n, port):
    import torch
    import torch.distributed as dist
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    for m, iters in ((1 << 10, 400), (1 << 16, 100), (1 << 20, 10), (1 << 24, 3)):
        t = torch.empty(m, dtype=torch.float32)
        total = 0.0
        for it in range(-2, iters):
            t.fill_(float((it + rank) & 7))
            t0 = time.perf_counter()
            dist.all_reduce(t)
            dt = time.perf_counter() - t0
            if it >= 0:
                total += dt
        worst = torch.tensor([total / iters], dtype=torch.float64)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(json.dumps({"name": "gloo", "ranks": n, "floats": m, "seconds": worst.item()}), flush=True)
    dist.destroy_process_group()


def main():
    n, port = int(sys.argv[1]), int(sys.argv[2])
    import torch.multiprocessing as mp
    mp.spawn(worker, args=(n, port), nprocs=n, join=True)


if __name__ == "__main__":
    main()
