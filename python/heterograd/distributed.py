"""heterograd.distributed: an asynchronous parameter server for a PyTorch model across MPI
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

MPI is started by the module when mpirun started the process (and finalized at exit);
a module built without MPI refuses by name (``heterograd._core.mpi`` is False).
"""

import atexit
import time
from typing import Any, Dict, Iterable, Optional, Tuple, Union

from . import _core

__all__ = ["ParameterServer", "available", "methods"]


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


def _param_list(model_or_params) -> list:
    if hasattr(model_or_params, "parameters") and callable(model_or_params.parameters):
        return list(model_or_params.parameters())
    if isinstance(model_or_params, dict):
        raise TypeError("heterograd: invalid argument 'ParameterServer.params' = a dict: must be a "
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
