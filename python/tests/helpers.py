"""What the Python tests share: one list of the optimizers under test (each with its
torch.optim twin and its C++ optimizer), parameters and gradient sequences from a seed, and
bitwise comparisons.

Gradients are a fixed sequence, independent of the parameters, so that two optimizers that
differ in the last bit at some step are not driven apart by a loss surface: what the tests
measure is the optimizers' arithmetic.
"""

import copy
import dataclasses
from typing import Callable, List, Optional

import torch

import heterograd._core as core
import heterograd.optim as hgo

SHAPES = [(7, 5), (5,), (33,), (4, 3, 2), (1,)]


@dataclasses.dataclass
class Case:
    name: str
    ours: Callable  # (params, flat) -> optimizer
    torch: Optional[Callable]  # (params, foreach) -> torch.optim optimizer, or None
    cxx_kind: str  # the C++ optimizer (reference_run's kind)
    cxx_config: Callable  # (tensor sizes) -> the _core config the C++ optimizer takes
    slots: tuple  # state names, in the kernel's order


def _cases() -> List[Case]:
    adagrad = dict(lr=0.05, lr_decay=1e-3, weight_decay=1e-2, initial_accumulator_value=0.1)
    return [
        Case("sgd", lambda ps, flat: hgo.SGD(ps, lr=0.01, weight_decay=1e-2, flat=flat),
             lambda ps, fe: torch.optim.SGD(ps, lr=0.01, weight_decay=1e-2, foreach=fe),
             "sgd", lambda n: core.SGDConfig(lr=0.01, weight_decay=1e-2), ()),
        Case("sgd_no_decay", lambda ps, flat: hgo.SGD(ps, lr=0.01, flat=flat),
             lambda ps, fe: torch.optim.SGD(ps, lr=0.01, foreach=fe),
             "sgd", lambda n: core.SGDConfig(lr=0.01), ()),
        Case("momentum",
             lambda ps, flat: hgo.SGD(ps, lr=0.01, momentum=0.9, weight_decay=1e-2, flat=flat),
             lambda ps, fe: torch.optim.SGD(ps, lr=0.01, momentum=0.9, weight_decay=1e-2,
                                            foreach=fe),
             "momentum", lambda n: core.MomentumConfig(lr=0.01, momentum=0.9, weight_decay=1e-2),
             ("momentum_buffer",)),
        Case("nesterov", lambda ps, flat: hgo.Nesterov(ps, lr=0.01, weight_decay=1e-2, flat=flat),
             lambda ps, fe: torch.optim.SGD(ps, lr=0.01, momentum=0.9, nesterov=True,
                                            weight_decay=1e-2, foreach=fe),
             "nesterov", lambda n: core.MomentumConfig(lr=0.01, momentum=0.9, weight_decay=1e-2),
             ("momentum_buffer",)),
        Case("adam", lambda ps, flat: hgo.Adam(ps, lr=1e-2, weight_decay=1e-2, flat=flat),
             lambda ps, fe: torch.optim.Adam(ps, lr=1e-2, weight_decay=1e-2, foreach=fe),
             "adam", lambda n: core.AdamConfig(lr=1e-2, weight_decay=1e-2),
             ("exp_avg", "exp_avg_sq")),
        Case("adamw", lambda ps, flat: hgo.AdamW(ps, lr=1e-2, flat=flat),
             lambda ps, fe: torch.optim.AdamW(ps, lr=1e-2, foreach=fe),
             "adamw", lambda n: core.AdamConfig(lr=1e-2, weight_decay=0.01),
             ("exp_avg", "exp_avg_sq")),
        Case("adagrad", lambda ps, flat: hgo.Adagrad(ps, flat=flat, **adagrad),
             lambda ps, fe: torch.optim.Adagrad(ps, foreach=fe, **adagrad),
             "adagrad", lambda n: core.AdagradConfig(lr=0.05, lr_decay=1e-3, weight_decay=1e-2,
                                                     initial_accumulator=0.1),
             ("sum",)),
        Case("lamb", lambda ps, flat: hgo.LAMB(ps, lr=1e-2, flat=flat), None,
             "lamb", lambda n: core.LAMBConfig(lr=1e-2, tensor_sizes=n),
             ("exp_avg", "exp_avg_sq")),
        # A schedule as the learning rate: evaluated by the library on both sides.
        Case("adam_cosine",
             lambda ps, flat: hgo.Adam(ps, lr=hgo.cosine_decay(1e-2, 20, 0.1, 5), flat=flat),
             None, "adam", lambda n: core.AdamConfig(lr=core.cosine_decay(1e-2, 20, 0.1, 5)),
             ("exp_avg", "exp_avg_sq")),
        Case("momentum_warmup",
             lambda ps, flat: hgo.Momentum(ps, lr=hgo.linear_warmup(0.05, 10, 0.001), flat=flat),
             None, "momentum",
             lambda n: core.MomentumConfig(lr=core.linear_warmup(0.05, 10, 0.001)),
             ("momentum_buffer",)),
    ]


CASES = {c.name: c for c in _cases()}
TORCH_CASES = [name for name, c in CASES.items() if c.torch is not None]


def make_params(dtype=torch.float32, seed=0, shapes=SHAPES) -> List[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=dtype).requires_grad_() for s in shapes]


def make_grads(steps, dtype=torch.float32, seed=1, shapes=SHAPES) -> List[List[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=g, dtype=dtype) for s in shapes] for _ in range(steps)]


def run(opt, params, grads, first=0, last=None):
    """Steps opt with grads[first:last] (each copied into the parameters' .grad in place)."""
    for step in grads[first:last]:
        for p, g in zip(params, step):
            if p.grad is None:
                p.grad = g.clone()
            else:
                p.grad.copy_(g)
        opt.step()
    return opt


def flat_of(tensors) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns (float32 -> int32, float64 -> int64): equal bits, equal values,
    NaN and signed zeros included."""
    t = t.detach().contiguous()
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int64)


def assert_bitwise(a: torch.Tensor, b: torch.Tensor, what=""):
    assert a.shape == b.shape, what
    diff = (bits(a) != bits(b)).nonzero()
    assert diff.numel() == 0, f"{what}: {diff.numel()} elements differ, first at {diff[0].tolist()}"


def snapshot(params, opt):
    """Everything a failed step must leave as it was: parameter values and the optimizer's state
    and settings."""
    return [p.detach().clone() for p in params], copy.deepcopy(opt.state_dict())


def assert_unchanged(before, params, opt):
    values, state = before
    for k, (v, p) in enumerate(zip(values, params)):
        assert_bitwise(v, p.detach(), f"params[{k}]")
    now = opt.state_dict()
    assert now["param_groups"] == state["param_groups"]
    assert now["state"].keys() == state["state"].keys()
    for key, entry in state["state"].items():
        for name, value in entry.items():
            if isinstance(value, torch.Tensor):
                assert_bitwise(value, now["state"][key][name], f"state[{key}][{name}]")
            else:
                assert value == now["state"][key][name]
