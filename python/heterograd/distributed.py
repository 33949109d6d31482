"""heterograd.distributed: an asynchronous parameter server (ParameterServer) and local SGD /
FedAvg / DiLoCo around the user's own optimizer (LocalSGD) for a PyTorch model across MPI
processes (heterograd's MPI transport; no mpi4py).

    # mpirun -np 3 python train.py
    import heterograd.distributed as hgd

    with hgd.ParameterServer(model, method="ringmaster", lr=0.05, max_updates=1000,
                             threshold=4) as ps:
        for x, y in itertools.cycle(loader):
            if not ps.pull():          # the server's model, written into model's tensors
                break
            loss_fn(model(x), y).backward()
            ps.push()                  # the gradients, for the job just pulled
    if ps.rank == 0:
        print(ps.summary)              # updates, results per outcome, staleness, ...

Rank 0 runs the server (the named server policy of heterograd.sim's list, with its parameters
checked by the library's descriptions, SGD at ``lr`` on the server, the real clock) inside
``__enter__``, until its stopping rule (``max_updates`` / ``horizon`` seconds); its ``pull()``
then returns False at once, so the same loop runs on every rank. Every other rank is a worker.
When the run is over each worker's last ``pull()`` returns False after writing the server's
final model into the model, so every rank leaves the ``with`` block holding the same
parameters.

The parameters are laid over one flat float32 buffer (each parameter's ``.data`` becomes a
view of it, and its ``.grad`` a view of a second one), so that the server's model is received
straight into the model's own tensors and the gradient is sent from where autograd wrote it:
no copy on either side. A gradient that autograd put elsewhere (after ``zero_grad()`` set it
to None) is copied into place by ``push()``. Every blocking call releases the GIL.

Local SGD (every rank trains with its own optimizer; every H steps the ranks average):

    # mpirun -np 3 python train.py
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with hgd.LocalSGD(model, opt, local_steps=8, weight=batch_size, outer="diloco") as ls:
        for x, y in loader:
            ls.zero_grad()
            loss_fn(model(x), y).backward()
            ls.step()                  # opt.step(); after every 8th, the round's average

MPI is started by the module when mpirun started the process (and finalized at exit);
a module built without MPI refuses by name (``heterograd._core.mpi`` is False).
"""

import atexit
import numbers
import time
from typing import Any, Dict, Iterable, Optional, Tuple, Union

from . import _core

__all__ = ["LocalSGD", "ParameterServer", "available", "methods"]


def available() -> bool:
    """Whether this build of heterograd has the MPI transport."""
    return bool(_core.mpi)


def methods():
    """The server methods: (name, title, [(field, default, meaning, rule)])."""
    return _core.dist_methods()


_finalizer_registered = False


def _register_finalizer():
    global _finalizer_registered
    if not _finalizer_registered:
        atexit.register(_core.dist_finalize)
        _finalizer_registered = True


def _param_list(model_or_params, who: str = "ParameterServer") -> list:
    if hasattr(model_or_params, "parameters") and callable(model_or_params.parameters):
        return list(model_or_params.parameters())
    if isinstance(model_or_params, dict):
        raise TypeError(f"heterograd: invalid argument '{who}.params' = a dict: must be a "
                        "torch.nn.Module or an iterable of tensors (param groups are the optimizer's, "
                        "not the server's)")
    return list(model_or_params)


def _detached(p):
    # torch refuses DLPack export of a tensor that requires grad; its detached alias shares
    # the memory, so the checks see the parameter itself.
    return p.detach() if hasattr(p, "detach") else p


class ParameterServer:
    """An asynchronous parameter server across the processes of ``mpirun -np N`` (N >= 2).

    Args:
        model_or_params: a ``torch.nn.Module`` or an iterable of float32 CPU tensors
            (C-contiguous, writable). Rank 0's values are the server's initial model.
        method: a server policy by name (``methods()``: ringmaster, asgd, rennala, fedbuff, ...).
        lr: the server's SGD step (a number or a heterograd Schedule of the update count).
        max_updates: the server stops after this many model updates.
        horizon: ... or after this many real seconds (0: none); at least one must be given.
        timeout: every receive's deadline in seconds (a peer that never answers is an error).
        shutdown_grace: how long the server waits for workers still computing at the end.
        **policy_params: the method's parameters (e.g. ``threshold=4`` for ringmaster).

    Everything is checked on every rank before MPI is touched: a bad argument raises the same
    exception on every rank (TypeError / ValueError naming the argument, value and rule).
    """

    def __init__(self, model_or_params: Union[Any, Iterable[Any]], method: str = "ringmaster",
                 lr: Any = 0.01, *, max_updates: Optional[int] = None, horizon: float = 0.0,
                 timeout: float = 120.0, shutdown_grace: float = 60.0, **policy_params):
        self.params = _param_list(model_or_params)
        self._sizes = _core.dist_check_params([_detached(p) for p in self.params])
        for k, p in enumerate(self.params):
            if not _is_torch_tensor(p):
                raise TypeError(f"heterograd: invalid argument 'ParameterServer.params[{k}]' = a "
                                f"{type(p).__module__}.{type(p).__name__}: must be a torch.Tensor "
                                "(its storage becomes a view of the server's flat buffer)")
        if max_updates is not None and (isinstance(max_updates, bool) or not isinstance(max_updates, int)
                                        or max_updates <= 0):
            raise ValueError(f"heterograd: invalid argument 'max_updates' = {max_updates!r}: must be "
                             "None or an integer > 0")
        self._args = (method, dict(policy_params), lr, int(max_updates or 0), float(horizon),
                      float(timeout), float(shutdown_grace))
        self.config: Dict[str, Any] = _core.dist_check(*self._args)
        self.method = method
        self.summary: Optional[Dict[str, Any]] = None
        #: rank 0: time.perf_counter() when serve() began and when it returned
        self.served: Optional[Tuple[float, float]] = None
        self._session = None
        self.flat = None
        self.grads = None

    # ---- setup and teardown -------------------------------------------------------------

    def __enter__(self) -> "ParameterServer":
        if not _core.mpi:
            raise RuntimeError("heterograd.distributed: this heterograd._core was built without MPI "
                               "(HG_HAS_MPI; configure with the mpi component found): no "
                               "ParameterServer")
        self._flatten()
        _register_finalizer()
        self._session = _core.DistSession(*self._args, flat=self.flat, grads=self.grads)
        if self._session.is_server:
            t0 = time.perf_counter()
            self.summary = self._session.serve()
            self.served = (t0, time.perf_counter())
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        s = self._session
        if s is not None and not s.is_server and exc_type is None:
            # A loop that ended before the server's stop: wait for it without pushing (the
            # job in hand is abandoned; the other workers finish the run), then take the
            # final model like any worker.
            while s.pull():
                pass
        return False

    def _flatten(self):
        import torch

        total = sum(self._sizes)
        self.flat = torch.empty(total, dtype=torch.float32)
        self.grads = torch.zeros(total, dtype=torch.float32)
        self._views = []
        off = 0
        with torch.no_grad():
            for p, n in zip(self.params, self._sizes):
                self.flat[off:off + n].copy_(p.detach().reshape(-1))
                g = self.grads[off:off + n].view_as(p)
                p.data = self.flat[off:off + n].view_as(p)
                p.grad = g
                self._views.append(g)
                off += n

    # ---- the worker's loop --------------------------------------------------------------

    @property
    def rank(self) -> int:
        return self._require().rank

    @property
    def size(self) -> int:
        return self._require().size

    @property
    def is_server(self) -> bool:
        return self._require().is_server

    @property
    def running(self) -> bool:
        """False once the run is over for this rank (always False on rank 0 inside the block)."""
        return self._require().running

    def pull(self) -> bool:
        """Waits for the next job: the server's model is written into the model's tensors and
        the gradients are zeroed. False when the run is over (the model then holds the
        server's final parameters)."""
        s = self._require()
        more = s.pull()
        if more:
            self.grads.zero_()
            for p, g in zip(self.params, self._views):
                if p.grad is not g:
                    p.grad = g
        return more

    def push(self) -> bool:
        """Sends the gradients of the job last pulled; False (nothing sent) when the server
        has moved on (the job was interrupted or the run is over)."""
        s = self._require()
        for p, g in zip(self.params, self._views):
            if p.grad is None:
                g.zero_()
            elif p.grad is not g:
                g.copy_(p.grad)
        return s.push()

    def step(self) -> bool:
        """push() then pull(): the loop ``while ps.pull(): ...backward(); ps.step()`` ."""
        self.push()
        return self.pull()

    def model_hash(self) -> int:
        """FNV-1a of the model's flat parameters (equal on every rank after the run)."""
        return _core.dist_hash(self.flat)

    def _require(self):
        if self._session is None:
            raise RuntimeError("heterograd.distributed: ParameterServer is used outside its `with` block")
        return self._session


def _is_torch_tensor(x) -> bool:
    try:
        import torch
    except ImportError:
        return False
    return isinstance(x, torch.Tensor)


class LocalSGD:
    """Local SGD, FedAvg and DiLoCo around the user's own optimizer, across the processes of
    ``mpirun -np N`` (N >= 1).

    Every ``step()`` runs the inner optimizer's ``step()``; after every ``local_steps``-th the
    round's synchronisation runs (a collective: every rank at once), in C++ with the GIL
    released: the weighted average of the ranks' models, sum_i w_i x_i / sum_i w_i (the MPI
    transport's weighted average, in place in the model's own memory), then, with an outer
    optimizer, its step on the pseudo-gradient anchor - average (optim/outer.hpp; the anchor is
    the model of the last round) and the model becomes the new anchor.

    Args:
        model_or_params: a ``torch.nn.Module`` or an iterable of float32 CPU tensors (C-contiguous,
            writable): what is averaged. ``__enter__`` lays them over one flat buffer (each
            ``.data`` becomes a view of it) and writes rank 0's values into every rank's.
        optimizer: the inner optimizer over those parameters (anything with ``step()`` and
            ``zero_grad()``: ``torch.optim.SGD``, ``heterograd.optim.Adam``, ...).
        local_steps: H, this rank's inner steps per round (an integer >= 1). Ranks may pass
            different values (biased local SGD: H_i per rank); round r then ends on every rank
            after its own H_i steps of that round.
        weight: this rank's share of the average (finite, > 0; None: 1, equal shares), e.g.
            its batch size b_i, or b_i * H_i for the samples of a round; ``set_weight`` changes
            it between rounds (a load balancer's new batch size).
        outer: None (the model becomes the average: local SGD, FedAvg), ``'diloco'`` (Nesterov
            momentum, lr 0.7, momentum 0.9: Douillard et al., "DiLoCo: Distributed
            Low-Communication Training of Language Models", 2023), ``'fedavgm'`` (heavy-ball
            momentum, lr 1, momentum 0.9) or ``'sgd'`` (lr 1).
        outer_lr, outer_momentum: the outer optimizer's values (None: its defaults).
        timeout: every collective's deadline in seconds.

    Every argument is checked before MPI is touched (TypeError / ValueError naming the
    argument, the value and the rule).
    """

    def __init__(self, model_or_params: Union[Any, Iterable[Any]], optimizer: Any,
                 local_steps: int = 8, *, weight: Optional[float] = None,
                 outer: Optional[str] = None, outer_lr: Optional[float] = None,
                 outer_momentum: Optional[float] = None, timeout: float = 120.0):
        self.params = _param_list(model_or_params, "LocalSGD")
        self._sizes = _core.dist_check_params([_detached(p) for p in self.params], "LocalSGD")
        for k, p in enumerate(self.params):
            if not _is_torch_tensor(p):
                raise TypeError(f"heterograd: invalid argument 'LocalSGD.params[{k}]' = a "
                                f"{type(p).__module__}.{type(p).__name__}: must be a torch.Tensor "
                                "(its storage becomes a view of the flat buffer)")
        if not (callable(getattr(optimizer, "step", None)) and callable(getattr(optimizer, "zero_grad", None))):
            raise TypeError(f"heterograd: invalid argument 'optimizer' = a {type(optimizer).__name__}: "
                            "must have step() and zero_grad() (a torch.optim.Optimizer)")
        if isinstance(local_steps, bool) or not isinstance(local_steps, int):
            raise TypeError(f"heterograd: invalid argument 'local_steps' = {local_steps!r}: must be an "
                            "integer >= 1 (local steps per round, H)")
        if outer is not None and not isinstance(outer, str):
            raise TypeError(f"heterograd: invalid argument 'outer' = {outer!r}: must be None or a name")
        weight = 1.0 if weight is None else _number("weight", weight)
        self._args = (local_steps, weight, outer, _opt_number("outer_lr", outer_lr),
                      _opt_number("outer_momentum", outer_momentum), _number("timeout", timeout))
        self.config: Dict[str, Any] = _core.local_sgd_check(*self._args)
        self.optimizer = optimizer
        self.local_steps = local_steps
        self.steps = 0  # inner steps over the run
        self.steps_in_round = 0
        self._session = None
        self.flat = None

    # ---- setup and teardown -------------------------------------------------------------

    def __enter__(self) -> "LocalSGD":
        if not _core.mpi:
            raise RuntimeError("heterograd.distributed: this heterograd._core was built without MPI "
                               "(HG_HAS_MPI; configure with the mpi component found): no LocalSGD")
        sizes = _core.dist_check_params([_detached(p) for p in self.params], "LocalSGD")
        for k, (now, then) in enumerate(zip(sizes, self._sizes)):
            if now != then:
                raise ValueError(f"heterograd: invalid argument 'LocalSGD.params[{k}]' = {now} elements: "
                                 f"must keep the {then} it had when the LocalSGD was made")
        self._flatten()
        _register_finalizer()
        self._session = _core.LocalSession(*self._args, flat=self.flat)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        return False

    def _flatten(self):
        import torch

        self.flat = torch.empty(sum(self._sizes), dtype=torch.float32)
        off = 0
        with torch.no_grad():
            for p, n in zip(self.params, self._sizes):
                self.flat[off:off + n].copy_(p.detach().reshape(-1))
                p.data = self.flat[off:off + n].view_as(p)
                off += n
        self._views = [(p.data_ptr(), p.numel()) for p in self.params]

    def _check_views(self):
        for k, (p, (ptr, n)) in enumerate(zip(self.params, self._views)):
            if p.data_ptr() != ptr or p.numel() != n:
                raise ValueError(f"heterograd: invalid argument 'LocalSGD.params[{k}]' = a new tensor "
                                 f"({p.numel()} elements, not the flat buffer's view): must stay the "
                                 f"view LocalSGD laid it over ({n} elements; a parameter replaced or "
                                 "resized after construction cannot be averaged)")

    # ---- the training loop --------------------------------------------------------------

    @property
    def rank(self) -> int:
        return self._require().rank

    @property
    def size(self) -> int:
        return self._require().size

    @property
    def rounds(self) -> int:
        """Synchronisations so far."""
        return self._require().rounds

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def zero_grad(self, *args, **kw):
        return self.optimizer.zero_grad(*args, **kw)

    def step(self, closure=None):
        """The inner optimizer's step; after the round's last, the round's synchronisation
        (collective). Returns what the inner step returned (the closure's loss)."""
        s = self._require()
        last = self.steps_in_round + 1 >= self.local_steps
        if last:
            self._check_views()  # before anything changes
        loss = self.optimizer.step() if closure is None else self.optimizer.step(closure)
        self.steps += 1
        self.steps_in_round += 1
        if last:
            s.sync()
            self.steps_in_round = 0
        return loss

    def sync(self):
        """The synchronisation now, ending the round early (collective: every rank calls it,
        e.g. for one common model after a loop that stopped mid-round)."""
        s = self._require()
        self._check_views()
        s.sync()
        self.steps_in_round = 0

    def set_weight(self, weight: float):
        """This rank's share of the next averages (finite, > 0)."""
        s = self._require()
        w = _number("weight", weight)
        _core.local_sgd_check(self._args[0], w, *self._args[2:])
        s.set_weight(w)
        self._args = (self._args[0], w) + self._args[2:]
        self.config["weight"] = w

    def model_hash(self) -> int:
        """FNV-1a of the model's flat parameters (equal on every rank after a round)."""
        return _core.dist_hash(self.flat)

    # ---- checkpoints --------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """The wrapper's state (step counters, rounds, the anchor and the outer optimizer's
        state, copies) and the inner optimizer's ``state_dict()`` under 'optimizer'. The model's
        parameters are the model's own ``state_dict()``'s."""
        import torch

        s = self._require()
        anchor = torch.empty_like(self.flat) if s.has_anchor else None
        slots = [torch.empty_like(self.flat) for _ in range(s.outer_slots)]
        count = s.read_state(anchor, slots)
        return {"config": dict(self.config), "steps": self.steps, "steps_in_round": self.steps_in_round,
                "rounds": s.rounds, "anchor": anchor, "outer_slots": slots, "outer_count": count,
                "optimizer": self.optimizer.state_dict() if hasattr(self.optimizer, "state_dict") else None}

    def load_state_dict(self, state: Dict[str, Any]):
        """Restores a ``state_dict()`` of a LocalSGD with the same outer optimizer and model
        size; everything is checked before anything changes."""
        s = self._require()
        keys = ("config", "steps", "steps_in_round", "rounds", "anchor", "outer_slots", "outer_count", "optimizer")
        missing = [k for k in keys if k not in state]
        if missing:
            raise ValueError(f"heterograd: invalid argument 'LocalSGD.state' = a dict without {missing}: "
                             "must be a LocalSGD.state_dict()")
        if state["config"].get("outer") != self.config["outer"]:
            raise ValueError(f"heterograd: invalid argument 'LocalSGD.state.config.outer' = "
                             f"{state['config'].get('outer')!r}: must be this LocalSGD's outer "
                             f"({self.config['outer']!r})")
        if not 0 <= state["steps_in_round"] < self.local_steps:
            raise ValueError(f"heterograd: invalid argument 'LocalSGD.state.steps_in_round' = "
                             f"{state['steps_in_round']!r}: must be in [0, local_steps = {self.local_steps})")
        if (state["anchor"] is None) == s.has_anchor:
            raise ValueError("heterograd: invalid argument 'LocalSGD.state.anchor' = "
                             f"{'None' if state['anchor'] is None else 'a tensor'}: must be "
                             f"{'a tensor' if s.has_anchor else 'None'} for outer {self.config['outer']!r}")
        s.check_state(state["anchor"], list(state["outer_slots"]), int(state["outer_count"]))
        if state["optimizer"] is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        s.write_state(int(state["rounds"]), state["anchor"], list(state["outer_slots"]),
                      int(state["outer_count"]))
        self.steps = int(state["steps"])
        self.steps_in_round = int(state["steps_in_round"])

    def _require(self):
        if self._session is None:
            raise RuntimeError("heterograd.distributed: LocalSGD is used outside its `with` block")
        return self._session


def _number(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):  # numpy's scalars too
        raise TypeError(f"heterograd: invalid argument '{name}' = {v!r}: must be a number")
    return float(v)


def _opt_number(name: str, v) -> Optional[float]:
    return None if v is None else _number(name, v)
