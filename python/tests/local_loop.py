"""Run by test_local_sgd_mpi.py under `mpirun -np 3`: heterograd.distributed.LocalSGD on a small
MLP, recording what the test checks against its own arithmetic. The inner optimizer is wrapped
by Recorder, whose step() copies the model after the inner step: the rank's model just before
a round's average. Each rank writes <prefix>.<rank>.json with one entry per scenario:

  fedavg   H = 3, weights = batch sizes (4, 8, 12), SGD with momentum, 2 rounds;
  dp_equal H = 1, equal weights and batches (8), plain SGD, 3 steps (the batches recorded);
  dp_batch H = 1, weights = batch sizes (4, 8, 12), plain SGD, 3 steps;
  biased   per-rank H (1, 2, 4), weights b_i * H_i, 2 rounds;
  diloco   outer 'diloco' (lr 0.7, momentum 0.9), H = 2, weights = batch sizes, 2 rounds, then
           a checkpoint, a third round, the checkpoint restored and the third round again, and
           a fresh LocalSGD loading the checkpoint;
  fedavgm  outer 'fedavgm' (heavy ball, lr 1, momentum 0.9), H = 2, weights = batch sizes;
  refused  a parameter replaced inside the block, and a checkpoint of the wrong shape: the
           errors, and the model and the state before and after;
  large    a 4 MB model (10^6 float32, past the transport's 1 MB segment: several segments a
           ring step): each rank's model a known function of its rank, one sync(), the error
           against the weighted mean that every rank computes for itself in float64;
  gil      rank 2 sleeps 0.2 s before its round's last step, so ranks 0 and 1 wait in the
           allreduce meanwhile; a Python thread on every rank counts while step() blocks, and
           the parameters' addresses are checked to stay inside the flat buffer.
"""

import copy
import json
import sys
import threading
import time

import torch

import heterograd.distributed as hgd

BATCHES = (4, 8, 12)


def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def batch(rank: int, step: int, n: int):
    g = torch.Generator().manual_seed(10_000 * rank + step)
    x = torch.randn(n, 6, generator=g)
    return x, x[:, :2].sum(1, keepdim=True) - x[:, 3:4]


def loss_of(model, x, y):
    return ((model(x) - y) ** 2).mean()


class Recorder:
    """The inner optimizer, recording the flat model after each inner step."""

    def __init__(self, opt):
        self.opt, self.after, self.ls = opt, [], None

    def step(self, closure=None):
        out = self.opt.step()
        self.after.append(self.ls.flat.tolist())
        return out

    def zero_grad(self, set_to_none=True):
        self.opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return self.opt.state_dict()

    def load_state_dict(self, s):
        self.opt.load_state_dict(s)

    @property
    def param_groups(self):
        return self.opt.param_groups


def train(ls, model, rank, steps, n, first=0):
    """`steps` wrapper steps on this rank's batches; per step the model after it and whether
    it closed a round."""
    posts, synced, data = [], [], []
    for k in range(first, first + steps):
        x, y = batch(rank, k, n)
        data.append([x.tolist(), y.tolist()])
        ls.zero_grad()
        loss_of(model, x, y).backward()
        r = ls.rounds
        ls.step()
        posts.append(ls.flat.tolist())
        synced.append(ls.rounds == r + 1)
    return {"post": posts, "synced": synced, "data": data}


def scenario(rank, H, weight, steps, n, opt_kw, **kw):
    model = make_model(seed=rank)  # different on every rank: __enter__ broadcasts rank 0's
    rec = Recorder(torch.optim.SGD(model.parameters(), **opt_kw))
    with hgd.LocalSGD(model, rec, local_steps=H, weight=weight, **kw) as ls:
        rec.ls = ls
        out = {"init": ls.flat.tolist(), "init_hash": ls.model_hash()}
        out.update(train(ls, model, rank, steps, n))
        out.update(pre=rec.after, hash=ls.model_hash(), rounds=ls.rounds, config=ls.config)
    return out


def tensors(sd):
    return {"anchor": sd["anchor"].tolist(), "slots": [s.tolist() for s in sd["outer_slots"]],
            "count": sd["outer_count"], "rounds": sd["rounds"], "steps": sd["steps"],
            "steps_in_round": sd["steps_in_round"]}


def diloco(rank):
    b = BATCHES[rank]
    model = make_model(seed=rank)
    rec = Recorder(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    out = {}
    with hgd.LocalSGD(model, rec, local_steps=2, weight=b, outer="diloco") as ls:
        rec.ls = ls
        out["init"] = ls.flat.tolist()
        out["config"] = ls.config
        out.update(train(ls, model, rank, 4, b))
        out["pre"] = list(rec.after)
        sd = copy.deepcopy(ls.state_dict())  # torch's state_dict() holds the live buffers
        out["sd"] = tensors(sd)
        saved = ls.flat.clone()
        third = train(ls, model, rank, 2, b, first=4)
        out["third"] = {"hash": ls.model_hash(), "sd": tensors(ls.state_dict())}
        with torch.no_grad():
            ls.flat.copy_(saved)
        ls.load_state_dict(sd)
        again = train(ls, model, rank, 2, b, first=4)
        out["again"] = {"hash": ls.model_hash(), "sd": tensors(ls.state_dict()),
                        "same_post": again["post"] == third["post"]}
    fresh_model = make_model(seed=7)
    fresh = hgd.LocalSGD(fresh_model, torch.optim.SGD(fresh_model.parameters(), lr=0.05, momentum=0.9),
                         local_steps=2, weight=b, outer="diloco")
    with fresh:
        fresh.load_state_dict(sd)
        out["fresh"] = tensors(fresh.state_dict())
        out["fresh_inner"] = fresh.optimizer.state_dict()["state"][0]["momentum_buffer"].tolist()
        out["saved_inner"] = sd["optimizer"]["state"][0]["momentum_buffer"].tolist()
    return out


def refused(rank):
    model = make_model(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    out = {}
    with hgd.LocalSGD(model, opt, local_steps=2, outer="diloco") as ls:
        x, y = batch(rank, 0, 4)
        loss_of(model, x, y).backward()
        ls.step()  # not the round's last: no check, no sync
        sd = copy.deepcopy(ls.state_dict())
        before = (ls.flat.clone(), [p.detach().clone() for p in model.parameters()])
        model[2].bias.data = torch.zeros(1)  # replaced: no longer a view of the flat buffer
        try:
            ls.step()
            out["replaced"] = None
        except ValueError as e:
            out["replaced"] = str(e)
        out["unchanged"] = (torch.equal(before[0], ls.flat) and ls.steps == 1 and ls.rounds == 0
                            and torch.equal(opt.state_dict()["state"][0]["momentum_buffer"],
                                            sd["optimizer"]["state"][0]["momentum_buffer"]))
        bad = dict(sd, anchor=torch.zeros(5))
        try:
            ls.load_state_dict(bad)
            out["short_anchor"] = None
        except ValueError as e:
            out["short_anchor"] = str(e)
        try:
            ls.load_state_dict(dict(sd, config=dict(sd["config"], outer=None), anchor=None))
            out["other_outer"] = None
        except ValueError as e:
            out["other_outer"] = str(e)
        out["state_unchanged"] = tensors(ls.state_dict()) == tensors(sd)
    return out


def large_model(rank: int, n: int) -> torch.Tensor:
    k = torch.arange(n, dtype=torch.float64)
    return (rank + 1) * torch.sin(k * 1e-3 * (rank + 1)) + 0.01 * rank


def large(rank):
    n = 1_000_000
    x = torch.zeros(n)
    with hgd.LocalSGD([x], torch.optim.SGD([x], lr=0.1), local_steps=1, weight=BATCHES[rank]) as ls:
        with torch.no_grad():
            ls.flat.copy_(large_model(rank, n))
        ls.sync()
        want = sum(b * large_model(r, n).float().double() for r, b in enumerate(BATCHES)) / sum(BATCHES)
        err = (ls.flat.double() - want).abs().max().item()
        return {"err": err, "hash": ls.model_hash(), "rounds": ls.rounds}


def gil(rank):
    model = make_model(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ticks, done = [], threading.Event()

    def count():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    threading.Thread(target=count, daemon=True).start()
    with hgd.LocalSGD(model, opt, local_steps=1) as ls:
        ptrs = [p.data_ptr() for p in model.parameters()]
        x, y = batch(rank, 0, 4)
        loss_of(model, x, y).backward()
        if rank == 2:
            time.sleep(0.2)
        t0 = time.perf_counter()
        ls.step()
        t1 = time.perf_counter()
        base, end = ls.flat.data_ptr(), ls.flat.data_ptr() + 4 * ls.flat.numel()
        views = all(base <= p.data_ptr() < end for p in model.parameters())
        stable = ptrs == [p.data_ptr() for p in model.parameters()]
    done.set()
    return {"step_s": t1 - t0, "ticks": sum(t0 < t < t1 for t in ticks), "views": views, "stable": stable}


def main():
    prefix = sys.argv[1]
    torch.set_num_threads(1)
    rank = None
    out = {}
    out["fedavg"] = None
    with hgd.LocalSGD([torch.zeros(1)], torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)) as probe:
        rank = probe.rank
        out["size"] = probe.size
    b = BATCHES[rank]
    out["fedavg"] = scenario(rank, 3, b, 6, b, dict(lr=0.05, momentum=0.9))
    out["dp_equal"] = scenario(rank, 1, None, 3, 8, dict(lr=0.1))
    out["dp_batch"] = scenario(rank, 1, b, 3, b, dict(lr=0.1))
    h = (1, 2, 4)[rank]
    out["biased"] = scenario(rank, h, b * h, 2 * h, b, dict(lr=0.05))
    out["diloco"] = diloco(rank)
    out["fedavgm"] = scenario(rank, 2, b, 4, b, dict(lr=0.05), outer="fedavgm")
    out["refused"] = refused(rank)
    out["gil"] = gil(rank)
    out["large"] = large(rank)
    out["rank"] = rank
    with open(f"{prefix}.{rank}.json", "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
