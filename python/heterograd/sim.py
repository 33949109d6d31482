"""heterograd's simulator from Python, with the gradient computed by a Python function.

    import numpy as np
    import heterograd.sim as hgs

    c = np.array([0.0, 1.0, 2.0, 3.0])
    def grad(x, worker, job):                  # x: read-only view of the server's model
        return x.astype(np.float64) - c[worker]

    r = hgs.simulate(hgs.Ringmaster(threshold=4), grad, x0=np.zeros(1, np.float32),
                     times=hgs.fixed_times([1, 2, 4, 8]), horizon=2e4, lr=1e-3,
                     eval_interval=1e3)
    r.x, r.times, r.trajectory, r.applied, r.staleness["applied"]

The event loop, the server policy, the server's SGD step and the worker-time model are the
library's (runtime/sim.hpp, algorithms/async/, sim/worker_time.hpp), run in C++ with the GIL
released; only ``grad`` (and ``eval``) run in Python. Each method's parameters, defaults and
rules are read from the library's described configuration structs (core/describe.hpp), so they
are written once: ``Ringmaster.fields``, ``help(hgs.Ringmaster)``.

``grad(x, worker, job)`` is called when worker ``worker`` starts its job ``job`` (0-based,
interrupted jobs count), at the model as it is then (what a worker reading that version sees);
its result is delivered at the job's virtual finish time. Under ``LocalSGD`` (the round
runtime) it is called for every local step, with the worker's own replica and its step count. It must return an array of x0's shape,
float32 or float64 (rounded to x0's dtype), C-contiguous. A wrong result, or an exception in
``grad`` or ``eval`` (KeyboardInterrupt included), stops the run and is raised by
``simulate``; the arrays the caller holds are unchanged. Randomness in ``grad`` should be drawn
from (worker, job) (e.g. ``np.random.default_rng([seed, worker, job])``) to keep runs
reproducible: the simulator's own randomness comes from the time models' seeds.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional, Sequence, Union

import numpy as np

from . import _core
from ._core import (Problem, Schedule, TimeModel, constant_time, exponential_times, fixed_times,
                    half_normal_noise, linear_times, lognormal_times, scalar_quadratics,
                    sqrt_times, worst_case_quadratic)

__all__ = ["simulate", "SimResult", "Method", "Problem", "TimeModel", "fixed_times",
           "sqrt_times", "linear_times", "half_normal_noise", "lognormal_times",
           "exponential_times", "constant_time", "scalar_quadratics", "worst_case_quadratic",
           "methods"]


class Method:
    """A server policy and its configuration, checked at construction (a key that is not a
    parameter, or a value against its rule, raises naming ``method.key``, the value and the
    rule). ``config`` holds every parameter, defaults filled in from the C++ struct."""

    name: str = ""
    title: str = ""
    fields: tuple = ()

    def __init__(self, **config: Any) -> None:
        self.config: Dict[str, Any] = _core.sim_method_config(self.name, config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Method) and (self.name, self.config) == (other.name, other.config)


# Python class names of the C++ methods (any other method gets its name in CamelCase).
_CLASS_NAMES = {"asgd": "ASGD", "local_sgd": "LocalSGD", "delay_adaptive": "DelayAdaptiveASGD",
                "staleness_scaled": "StalenessScaledASGD", "ringmaster": "Ringmaster",
                "rennala": "Rennala", "rescaled": "RescaledASGD", "ia2sgd": "IA2SGD",
                "malenia": "Malenia", "ringleader": "Ringleader", "fedbuff": "FedBuff",
                "dc_asgd": "DCASGD", "ssp": "SSP", "dssp": "DSSP"}


def _method_class(name: str, title: str, fields: list) -> type:
    lines = [f"{title} (method '{name}').", ""]
    if fields:
        lines.append("Parameters (keyword; from the library's description of the config):")
        lines += [f"    {f}: {meaning} (default {default!r}; {rule})"
                  for f, default, meaning, rule in fields]
    else:
        lines.append("No parameters.")
    cls_name = _CLASS_NAMES.get(name) or "".join(p.title() for p in name.split("_"))
    return type(cls_name, (Method,), {"name": name, "title": title, "__doc__": "\n".join(lines),
                                      "fields": tuple(f[0] for f in fields),
                                      "__module__": __name__})


#: Every method by its name ("ringmaster", ...): the classes below.
methods: Dict[str, type] = {}
for _name, _title, _fields in _core.sim_methods():
    methods[_name] = _method_class(_name, _title, _fields)
    globals()[methods[_name].__name__] = methods[_name]
    __all__.append(methods[_name].__name__)


@dataclasses.dataclass
class SimResult:
    """One run. Per-worker arrays have one entry per worker; ``staleness[outcome][s]`` counts
    the updates with that outcome and staleness s (server updates between the version a
    gradient was computed at and the version it met)."""

    method: str
    x: np.ndarray                 # final parameters (x0's shape and dtype)
    times: np.ndarray             # virtual times of the evaluations
    trajectory: np.ndarray        # x at each evaluation: (evaluations, *x0.shape)
    metrics: np.ndarray           # eval(x) at each evaluation: (evaluations, values)
    applied: np.ndarray           # gradients used in an update, per worker
    buffered: np.ndarray          # kept for a later update (Rennala, Ringleader, FedBuff, ...)
    discarded: np.ndarray         # dropped (too stale; skipped non-finite)
    interrupted: np.ndarray       # computations stopped before they finished
    staleness: Dict[str, np.ndarray]
    jobs_finished: np.ndarray
    jobs_cancelled: np.ndarray
    busy: np.ndarray              # virtual seconds computing, per worker
    idle: np.ndarray
    waiting: np.ndarray           # blocked by the policy (SSP / DSSP)
    updates: int                  # server model version at the end
    end_time: float               # virtual time at the end
    events: int
    trace_hash: int               # 64-bit hash of every scheduling event (equal runs, equal hash)
    nonfinite_skipped: int

    @property
    def utilisation(self) -> np.ndarray:
        """busy / end_time per worker."""
        return self.busy / self.end_time if self.end_time > 0 else np.zeros_like(self.busy)


def simulate(method: Union[Method, str], grad: Union[Callable[..., Any], Problem], x0: Any,
             times: Union[TimeModel, Sequence[float]], horizon: float, lr: Union[float, Schedule],
             *, workers: Optional[int] = None, config: Optional[Dict[str, Any]] = None,
             max_events: Optional[int] = None, eval_interval: float = 0.0,
             eval: Optional[Callable[[np.ndarray], Any]] = None,
             nonfinite: str = "fail") -> SimResult:
    """Simulates ``method`` on a parameter server started at x0 (float32 or float64, any
    shape; copied) with SGD at ``lr`` (a number or a heterograd Schedule of the update count),
    until virtual time ``horizon`` (or ``max_events`` delivered jobs).

    ``grad``: ``grad(x, worker, job) -> array`` (see the module's text), or a built-in
    ``Problem`` computed in C++ (``scalar_quadratics``, ``worst_case_quadratic``).
    ``times``: a TimeModel (``fixed_times``, ``sqrt_times(n, seed) + half_normal_noise(seed)``,
    ...) or a list of per-worker job times; ``workers`` when the model does not fix the count.
    ``method``: a Method (``Ringmaster(threshold=4)``) or a method's name with ``config``.
    ``eval_interval`` > 0 records x (``trajectory``) and ``eval(x)`` (a number or a sequence
    of numbers: ``metrics``) at 0, eval_interval, 2 eval_interval, ... ``nonfinite``: what a
    gradient with an infinity or a NaN gets: ``fail`` (an error naming the method, worker and
    entry), ``skip`` (dropped, counted in nonfinite_skipped) or ``zero`` (its bad entries zeroed).
    """
    if isinstance(method, Method):
        if config:
            raise TypeError("heterograd: invalid argument 'config' = a dict: must be None when "
                            "method is a Method (its configuration is the Method's)")
        name, cfg = method.name, method.config
    elif isinstance(method, str):
        name, cfg = method, dict(config or {})
    else:
        raise TypeError(f"heterograd: invalid argument 'method' = {method!r}: must be a "
                        "heterograd.sim Method or a method's name")
    if not isinstance(times, TimeModel):
        times = fixed_times([float(t) for t in times])
    if isinstance(x0, (list, tuple, float, int)):
        x0 = np.asarray(x0, dtype=np.float64)
    r = _core.simulate(name, cfg, grad, x0, times, horizon=float(horizon), lr=lr,
                       workers=int(workers or 0), max_events=int(max_events or 0),
                       eval_interval=float(eval_interval), eval=eval, nonfinite=nonfinite)
    return SimResult(method=name, **r)
