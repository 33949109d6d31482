"""heterograd's fused optimizers as torch.optim optimizers.

SGD (with momentum and Nesterov), Momentum, Nesterov, Adam, AdamW, Adagrad and LAMB subclass
torch.optim.Optimizer: parameter groups, add_param_group, zero_grad, state_dict and
load_state_dict behave as PyTorch's, and the state uses PyTorch's names (``exp_avg``,
``exp_avg_sq``, ``momentum_buffer``, ``sum``, ``step``), so a state saved by torch.optim loads
here and the other way round. Each step runs the library's fused kernels on the tensors' own
memory (DLPack: no copy), with the C++ optimizers' numbers bit for bit.

Two modes:

* per-tensor (default): one fused pass over every tensor of a group (SGD, momentum, Adam: one
  parallel region for the whole list; Adagrad, LAMB: one kernel per tensor);
* ``flat=True``: each group's parameters and gradients are laid over one contiguous buffer at
  construction, as the C++ ``flat_module`` does (``p.data`` and ``p.grad`` become views of it),
  so one fused pass updates the whole group. Every parameter of a flat group is updated at every
  step (a missing gradient counts as zero), and the group keeps one step count.

A learning rate is a number or a heterograd schedule (``cosine_decay(0.1, 1000)``, ...),
evaluated by the library at the number of steps already applied; PyTorch's lr_scheduler works
as usual on number learning rates. Tensors must be float32 or float64, C-contiguous and on the
CPU (this build has no CUDA; CUDA tensors are refused by name).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

import torch
import torch.utils.dlpack

from . import _core
from ._core import (Schedule, constant, cosine_decay, inverse_sqrt, inverse_time,
                    linear_warmup, step_decay)

__all__ = ["SGD", "Momentum", "Nesterov", "Adam", "AdamW", "Adagrad", "LAMB", "Schedule",
           "constant", "linear_warmup", "step_decay", "cosine_decay", "inverse_sqrt",
           "inverse_time"]

LR = Union[float, Schedule]
_to_dlpack = torch.utils.dlpack.to_dlpack

# The defaults are the C++ structs' (kernels/hyperparameters.hpp): read once, written nowhere else.
_SGD = _core.SGDConfig()
_MOMENTUM = _core.MomentumConfig()
_ADAM = _core.AdamConfig()
_ADAMW = _core.adamw_defaults()
_ADAGRAD = _core.AdagradConfig()
_LAMB = _core.LAMBConfig()


def _inference(name: str) -> str:
    return (f"heterograd: invalid argument '{name}' = an inference tensor: must be writable "
            "(inference tensors are read-only outside torch.inference_mode)")


def _lr(value: Any) -> Any:
    """A group's learning rate as the configs take it: a Schedule, or a number."""
    if isinstance(value, Schedule):
        return value
    if isinstance(value, torch.Tensor):
        return float(value.item())
    return float(value)


class _Flat:
    """One group laid over flat buffers: the tensors at construction, their offsets, the flat
    parameters and gradients, the flat state slots (by state name) and the group's step."""

    def __init__(self, params: List[torch.Tensor], dtype: torch.dtype):
        self.params = list(params)
        self.sizes = [p.numel() for p in params]
        self.offsets = []
        off = 0
        for n in self.sizes:
            self.offsets.append(off)
            off += n
        self.numel = off
        self.flat_params = torch.empty(off, dtype=dtype)
        self.flat_grads = torch.zeros(off, dtype=dtype)
        self.slots: Dict[str, torch.Tensor] = {}
        self.step = 0
        self.grads: List[torch.Tensor] = []
        self.addresses: List[int] = []
        with torch.no_grad():
            for p, o, n in zip(self.params, self.offsets, self.sizes):
                self.flat_params[o:o + n].copy_(p.detach().reshape(-1))
                if p.grad is not None:
                    self.flat_grads[o:o + n].copy_(p.grad.detach().reshape(-1))
                self.addresses.append(0)
                self.adopt_param(p, len(self.addresses) - 1)
                self.grads.append(self.flat_grads[o:o + n].view_as(p))
                p.grad = self.grads[-1]

    def adopt_param(self, p: torch.Tensor, j: int) -> None:
        o, n = self.offsets[j], self.sizes[j]
        p.data = self.flat_params[o:o + n].view_as(p)
        self.addresses[j] = p.data_ptr()

    def view(self, flat: torch.Tensor, j: int) -> torch.Tensor:
        o, n = self.offsets[j], self.sizes[j]
        return flat[o:o + n].view_as(self.params[j])


class _Fused(torch.optim.Optimizer):
    """What every heterograd optimizer shares; a subclass gives `_slots(group)` (its state
    names, in the kernel's order), `_config(group)` and `_plan(...)`."""

    def __init__(self, params: Iterable, defaults: Dict[str, Any], flat: bool):
        self._flat = bool(flat)
        self._flats: List[Optional[_Flat]] = []
        self._counts: List[int] = []
        super().__init__(params, defaults)

    # --- what a subclass provides -------------------------------------------------------------
    def _slots(self, group: Dict[str, Any]) -> Tuple[str, ...]:
        raise NotImplementedError

    def _config(self, group: Dict[str, Any]) -> Any:
        raise NotImplementedError

    def _plan(self, i, group, config, index, params, grads, slots, step):
        raise NotImplementedError

    def _initial_slot(self, group: Dict[str, Any], name: str, like: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(like, memory_format=torch.contiguous_format)

    # --- groups --------------------------------------------------------------------------------
    def _where(self, i: int) -> str:
        return f"{type(self).__name__}.param_groups[{i}]"

    @staticmethod
    def _refuse_torch_options(group: Dict[str, Any], where: str) -> None:
        for key in ("amsgrad", "maximize", "differentiable", "capturable", "fused"):
            if group.get(key):
                raise ValueError(f"heterograd: invalid argument '{where}.{key}' = True: not "
                                 "available in heterograd's optimizers (torch.optim's option)")

    def _checked_config(self, group: Dict[str, Any], where: str) -> Any:
        self._refuse_torch_options(group, where)
        config = self._config(group)
        config.validate(where)
        return config

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """As torch.optim's; the group's settings and tensors are checked first (ValueError or
        TypeError naming them), and in flat mode the group is laid over its flat buffers."""
        super().add_param_group(param_group)
        i = len(self.param_groups) - 1
        group = self.param_groups[i]
        try:
            self._checked_config(group, self._where(i))
            for j, p in enumerate(group["params"]):
                if p.is_inference():
                    raise ValueError(_inference(f"{self._where(i)}.params[{j}]"))
                # Flat mode copies the tensors into its buffers: any layout will do.
                t = p.detach().contiguous() if self._flat else p.detach()
                _core.check_array(t, f"{self._where(i)}.params[{j}]", True)
            self._flats.append(self._lay_out(group, i) if self._flat else None)
        except BaseException:
            self.param_groups.pop()
            raise
        self._counts.append(len(group["params"]))

    def _lay_out(self, group: Dict[str, Any], i: int) -> _Flat:
        params = group["params"]
        if len(set(map(id, params))) != len(params):
            raise ValueError(f"heterograd: invalid argument '{self._where(i)}.params': a tensor "
                             "appears twice: flat mode lays each parameter out once")
        dtypes = {p.dtype for p in params}
        if len(dtypes) > 1:
            raise TypeError(f"heterograd: invalid argument '{self._where(i)}.params' = dtypes "
                            f"{sorted(map(str, dtypes))}: flat mode needs one dtype per group "
                            "(put each dtype in its own group)")
        return _Flat(params, params[0].dtype if params else torch.float32)

    # --- the step --------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """One step of every group. Everything is checked first: when a rule is broken, the
        exception names it and no parameter or state has changed."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._fresh: List[torch.Tensor] = []
        try:
            work = [self._collect(i, g) for i, g in enumerate(self.param_groups)]
            plans = []
            for i, (group, items) in enumerate(zip(self.param_groups, work)):
                self._refuse_torch_options(group, self._where(i))
                config = self._config(group)  # validated by the plan, naming the group
                for index, params, grads, slots, step in items:
                    plans.append(self._plan(i, group, config, index, params, grads, slots, step))
        except BaseException:
            for p in self._fresh:  # the state made for this step goes with it
                self.state.pop(p, None)
            raise
        for plan in plans:
            plan.run()
        for i, group in enumerate(self.param_groups):
            self._advance(i, group)
        return loss

    def _check_count(self, i: int, group: Dict[str, Any]) -> None:
        n = len(group["params"])
        if n != self._counts[i]:
            raise ValueError(
                f"heterograd: invalid argument '{self._where(i)}.params' = {n} tensors: must stay "
                f"the {self._counts[i]} given at construction (add a group with add_param_group)")

    def _collect(self, i: int, group: Dict[str, Any]) -> list:
        """The plans' arguments for group i: [(index, params, grads, slots, step)], after every
        check of the group has passed."""
        self._check_count(i, group)
        if self._flats[i] is not None:
            return self._collect_flat(i, group, self._flats[i])
        return self._collect_tensors(i, group)

    def _collect_tensors(self, i: int, group: Dict[str, Any]) -> list:
        names = self._slots(group)
        by_key: Dict[Tuple[int, torch.dtype], list] = {}
        for j, p in enumerate(group["params"]):
            if p.grad is None:
                continue
            self._check_tensor(i, j, p)
            if p not in self.state:
                self._fresh.append(p)
            state = self.state[p]
            for name in names:
                if name not in state:
                    state[name] = self._initial_slot(group, name, p)
                elif state[name].numel() != p.numel():
                    raise ValueError(
                        f"heterograd: invalid argument '{self._where(i)}.params[{j}]' = "
                        f"{p.numel()} elements: must keep the size of its state "
                        f"'{name}' ({state[name].numel()}): a parameter cannot change size")
            state.setdefault("step", 0)
            by_key.setdefault((int(state["step"]), p.dtype), []).append((j, p, state))
        # DLPack capsules made here (torch's C function) rather than by the extension through
        # Tensor.__dlpack__: half the cost per tensor, and no detach() for tensors that require
        # grad. The extension checks what a capsule says (dtype, device, strides) as usual.
        pack = _to_dlpack
        items = []
        for (step, _), entries in by_key.items():
            items.append(([j for j, _, _ in entries],
                          [pack(p) for _, p, _ in entries],
                          [pack(p.grad) for _, p, _ in entries],
                          [[pack(s[name]) for _, _, s in entries] for name in names],
                          step + 1))
        return items

    def _check_tensor(self, i: int, j: int, p: torch.Tensor) -> None:
        # What DLPack does not tell the C++ side: torch's own read-only tensors and sparse grads.
        if p.is_inference():
            raise ValueError(_inference(f"{self._where(i)}.params[{j}]"))
        if p.grad.is_sparse:
            raise ValueError(f"heterograd: invalid argument '{self._where(i)}.grads[{j}]' = a "
                             "sparse tensor: must be dense")

    def _collect_flat(self, i: int, group: Dict[str, Any], flat: _Flat) -> list:
        moved = []
        for j, p in enumerate(group["params"]):
            if p is not flat.params[j]:
                raise ValueError(
                    f"heterograd: invalid argument '{self._where(i)}.params[{j}]': a tensor other "
                    "than the one laid out at construction: flat mode lays a group out once")
            # The common case costs three comparisons: the tensor still lives in the buffer.
            if (p.data_ptr() != flat.addresses[j] or p.grad is not flat.grads[j]
                    or p.numel() != flat.sizes[j]):
                self._check_moved(i, j, p, flat)
                moved.append(j)
        for j in moved:
            self._readopt(flat, j)
        names = self._slots(group)
        for name in names:
            self._ensure_flat_slot(group, flat, name)
        pack = _to_dlpack
        return [(None, [pack(flat.flat_params)], [pack(flat.flat_grads)],
                 [[pack(flat.slots[name])] for name in names], flat.step + 1)]

    def _check_moved(self, i: int, j: int, p: torch.Tensor, flat: _Flat) -> None:
        """A tensor that left the flat buffers may come back only as it was laid out."""
        name = f"{self._where(i)}.params[{j}]"
        if p.numel() != flat.sizes[j] or p.dtype != flat.flat_params.dtype:
            raise ValueError(
                f"heterograd: invalid argument '{name}' = {p.numel()} elements of {p.dtype}: "
                f"must keep the {flat.sizes[j]} elements of {flat.flat_params.dtype} laid out at "
                "construction (a parameter cannot change size)")
        if p.is_inference():
            raise ValueError(_inference(name))
        if p.device.type != "cpu":
            raise ValueError(f"heterograd: invalid argument '{name}' = on {p.device}: must be in "
                             "host memory: this build of heterograd runs on the CPU only (built "
                             "without CUDA)")
        g = p.grad
        if g is not None and g is not flat.grads[j] and (g.is_sparse or g.shape != p.shape):
            raise ValueError(f"heterograd: invalid argument '{self._where(i)}.grads[{j}]': must "
                             "be dense and of its parameter's shape")

    @staticmethod
    def _readopt(flat: _Flat, j: int) -> None:
        """Brings tensor j back into the flat buffers: a parameter whose .data was replaced (its
        values are copied in) and a gradient set to None (zero) or replaced (copied in). Values
        are kept; only where they live changes."""
        p, o, n = flat.params[j], flat.offsets[j], flat.sizes[j]
        if p.data_ptr() != flat.addresses[j]:
            flat.flat_params[o:o + n].copy_(p.detach().reshape(-1))
            flat.adopt_param(p, j)
        if p.grad is not flat.grads[j]:
            if p.grad is None:
                flat.flat_grads[o:o + n].zero_()
            else:
                flat.flat_grads[o:o + n].copy_(p.grad.detach().reshape(-1))
            p.grad = flat.grads[j]

    def _ensure_flat_slot(self, group: Dict[str, Any], flat: _Flat, name: str) -> None:
        if name in flat.slots:
            return
        flat.slots[name] = self._initial_slot(group, name, flat.flat_params)
        for j, p in enumerate(flat.params):
            self.state[p][name] = flat.view(flat.slots[name], j)
            self.state[p].setdefault("step", flat.step)

    def _advance(self, i: int, group: Dict[str, Any]) -> None:
        flat = self._flats[i]
        if flat is not None:
            flat.step += 1
            for p in flat.params:
                self.state[p]["step"] = flat.step
            return
        for p in group["params"]:
            if p.grad is not None:
                self.state[p]["step"] = int(self.state[p]["step"]) + 1

    # --- gradients and state ---------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = False) -> None:
        """As torch.optim's. In flat mode the gradients stay views of the flat buffer and are
        zeroed in one pass whatever set_to_none says (None would leave the buffer)."""
        if not self._flat:
            return super().zero_grad(set_to_none=set_to_none)
        for flat in self._flats:
            if flat is None:
                continue
            flat.flat_grads.zero_()
            for j, p in enumerate(flat.params):
                if p.grad is not flat.grads[j]:
                    p.grad = flat.grads[j]

    def flat_buffers(self, group: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
        """Flat mode: the flat parameter and gradient buffers of a group (the tensors' memory)."""
        flat = self._flats[group] if group < len(self._flats) else None
        if flat is None:
            raise ValueError(f"heterograd: invalid argument 'group' = {group}: must be a group of "
                             "an optimizer made with flat=True")
        return flat.flat_params, flat.flat_grads

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """As torch.optim's (a state saved by torch.optim's optimizer of the same kind loads too).
        Everything is checked before anything is loaded: the groups' settings, every state
        tensor's size, and in flat mode one step count per group."""
        self._check_state_dict(state_dict)
        super().load_state_dict(state_dict)
        for i, group in enumerate(self.param_groups):
            self._adopt_loaded(i, group)

    def _check_state_dict(self, state_dict: Dict[str, Any]) -> None:
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups):
            raise ValueError(f"heterograd: invalid argument 'state_dict.param_groups' = {len(saved)} "
                             f"groups: must be {len(self.param_groups)} (this optimizer's)")
        for i, (group, sg) in enumerate(zip(self.param_groups, saved)):
            if len(sg["params"]) != len(group["params"]):
                raise ValueError(
                    f"heterograd: invalid argument 'state_dict.param_groups[{i}].params' = "
                    f"{len(sg['params'])} tensors: must be {len(group['params'])}")
            merged = dict(group)
            merged.update({k: v for k, v in sg.items() if k != "params"})
            self._checked_config(merged, f"state_dict.param_groups[{i}]")
            steps = set()
            for j, (key, p) in enumerate(zip(sg["params"], group["params"])):
                entry = state_dict["state"].get(key, {})
                self._check_entry(merged, entry, p, f"state_dict.state[{key}]")
                steps.add(int(entry.get("step", 0)))
            if self._flat and len(steps) > 1:
                raise ValueError(f"heterograd: invalid argument 'state_dict.param_groups[{i}]' = "
                                 f"steps {sorted(steps)}: a flat group keeps one step count")

    def _check_entry(self, group, entry: Dict[str, Any], p: torch.Tensor, where: str) -> None:
        for name in self._slots(group):
            if entry.get(name) is None:
                continue
            t = entry[name]
            if not isinstance(t, torch.Tensor) or t.numel() != p.numel():
                got = t.numel() if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"heterograd: invalid argument '{where}.{name}' = {got}: must be "
                                 f"a tensor of its parameter's {p.numel()} elements")
        if "step" in entry and int(entry["step"]) < 0:
            raise ValueError(f"heterograd: invalid argument '{where}.step' = {int(entry['step'])}: "
                             "must be >= 0")

    def _adopt_loaded(self, i: int, group: Dict[str, Any]) -> None:
        """After torch's load: steps as ints, slots as contiguous tensors of their parameter's
        shape and dtype, owned here (flat mode: copied into the flat slots)."""
        flat = self._flats[i] if i < len(self._flats) else None
        for key, value in self.defaults.items():  # settings torch's optimizers do not save
            group.setdefault(key, value)
        names = self._slots(group)
        for j, p in enumerate(group["params"]):
            state = self.state.get(p)
            if not state:
                continue
            state["step"] = int(state.get("step", 0))
            for name in names:
                if name in state and state[name] is None:
                    del state[name]
                if name in state:
                    t = state[name].detach().to(dtype=p.dtype).reshape(p.shape)
                    state[name] = t.clone(memory_format=torch.contiguous_format)
        if flat is None:
            return
        flat.step = max([int(self.state[p].get("step", 0)) for p in flat.params if p in self.state],
                        default=0)
        for name in names:
            loaded = [self.state[p].get(name) if p in self.state else None for p in flat.params]
            flat.slots.pop(name, None)
            self._ensure_flat_slot(group, flat, name)
            for j, t in enumerate(loaded):
                if t is not None:
                    flat.view(flat.slots[name], j).copy_(t)
        for p in flat.params:
            self.state[p]["step"] = flat.step


class SGD(_Fused):
    """SGD with optional heavy-ball or Nesterov momentum and L2 weight decay, as torch.optim.SGD
    (state: ``momentum_buffer``). momentum = 0 runs heterograd's sgd kernel; otherwise its
    momentum kernel: v <- momentum v + (1 - dampening) d, d = g + weight_decay p;
    p <- p - lr (nesterov ? d + momentum v : v). The velocity starts at zero, so with dampening
    > 0 the first step differs from PyTorch's (which starts it at d)."""

    def __init__(self, params: Iterable, lr: LR = _SGD.lr.value, momentum: float = 0.0,
                 dampening: float = _MOMENTUM.dampening, weight_decay: float = _SGD.weight_decay,
                 nesterov: bool = False, *, flat: bool = False):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("heterograd: invalid argument 'nesterov' = True: needs momentum > 0 "
                             "and dampening 0")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov)
        super().__init__(params, defaults, flat)

    def _slots(self, group):
        return ("momentum_buffer",) if group["momentum"] != 0 else ()

    def _config(self, group):
        if group["momentum"] == 0:
            return _core.SGDConfig(lr=_lr(group["lr"]), weight_decay=group["weight_decay"])
        return _core.MomentumConfig(lr=_lr(group["lr"]), momentum=group["momentum"],
                                    dampening=group["dampening"],
                                    weight_decay=group["weight_decay"])

    def _plan(self, i, group, config, index, params, grads, slots, step):
        where = self._where(i)
        if group["momentum"] == 0:
            return _core.plan_sgd(params, grads, config, step, where, index)
        return _core.plan_momentum(params, grads, slots[0], config, step,
                                   bool(group["nesterov"]), where, index)


class Momentum(SGD):
    """Heavy-ball momentum (Polyak 1964; PyTorch's form): SGD with momentum 0.9 by default."""

    def __init__(self, params: Iterable, lr: LR = _MOMENTUM.lr.value,
                 momentum: float = _MOMENTUM.momentum, dampening: float = _MOMENTUM.dampening,
                 weight_decay: float = _MOMENTUM.weight_decay, *, flat: bool = False):
        super().__init__(params, lr, momentum, dampening, weight_decay, False, flat=flat)


class Nesterov(SGD):
    """Nesterov momentum (Sutskever et al. 2013): SGD with momentum 0.9 and nesterov=True."""

    def __init__(self, params: Iterable, lr: LR = _MOMENTUM.lr.value,
                 momentum: float = _MOMENTUM.momentum,
                 weight_decay: float = _MOMENTUM.weight_decay, *, flat: bool = False):
        super().__init__(params, lr, momentum, 0.0, weight_decay, True, flat=flat)


class Adam(_Fused):
    """Adam (Kingma & Ba 2015) with L2 weight decay added to the gradient, as torch.optim.Adam
    without amsgrad (state: ``step``, ``exp_avg``, ``exp_avg_sq``). bias_correction=False drops
    the 1 - beta^t divisions (as in FedAdam)."""

    _decoupled = False

    def __init__(self, params: Iterable, lr: LR = _ADAM.lr.value,
                 betas: Tuple[float, float] = (_ADAM.beta1, _ADAM.beta2), eps: float = _ADAM.eps,
                 weight_decay: float = _ADAM.weight_decay, *,
                 bias_correction: bool = _ADAM.bias_correction, flat: bool = False):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        bias_correction=bias_correction)
        super().__init__(params, defaults, flat)

    def _slots(self, group):
        return ("exp_avg", "exp_avg_sq")

    def _config(self, group):
        b1, b2 = group["betas"]
        return _core.AdamConfig(lr=_lr(group["lr"]), beta1=b1, beta2=b2, eps=group["eps"],
                                weight_decay=group["weight_decay"],
                                bias_correction=bool(group.get("bias_correction", True)))

    def _plan(self, i, group, config, index, params, grads, slots, step):
        where = self._where(i)
        return _core.plan_adam(params, grads, slots[0], slots[1], config, step, self._decoupled,
                               where, index)


class AdamW(Adam):
    """AdamW (Loshchilov & Hutter 2019): decoupled weight decay p <- p (1 - lr weight_decay),
    default 0.01 (the C++ optim::adamw's, PyTorch's), as torch.optim.AdamW without amsgrad."""

    _decoupled = True

    def __init__(self, params: Iterable, lr: LR = _ADAMW.lr.value,
                 betas: Tuple[float, float] = (_ADAMW.beta1, _ADAMW.beta2),
                 eps: float = _ADAMW.eps, weight_decay: float = _ADAMW.weight_decay, *,
                 bias_correction: bool = _ADAMW.bias_correction, flat: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, bias_correction=bias_correction,
                         flat=flat)


class Adagrad(_Fused):
    """Adagrad (Duchi et al. 2011), as torch.optim.Adagrad (state: ``step``, ``sum``):
    clr = lr / (1 + (step - 1) lr_decay); s <- s + g'^2; p <- p - clr g' / (sqrt(s) + eps)."""

    def __init__(self, params: Iterable, lr: LR = _ADAGRAD.lr.value,
                 lr_decay: float = _ADAGRAD.lr_decay, weight_decay: float = _ADAGRAD.weight_decay,
                 initial_accumulator_value: float = _ADAGRAD.initial_accumulator,
                 eps: float = _ADAGRAD.eps, *, flat: bool = False):
        defaults = dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, eps=eps)
        super().__init__(params, defaults, flat)

    def _slots(self, group):
        return ("sum",)

    def _initial_slot(self, group, name, like):
        return torch.full_like(like, group["initial_accumulator_value"],
                               memory_format=torch.contiguous_format)

    def _config(self, group):
        return _core.AdagradConfig(lr=_lr(group["lr"]), eps=group["eps"],
                                   weight_decay=group["weight_decay"], lr_decay=group["lr_decay"],
                                   initial_accumulator=group["initial_accumulator_value"])

    def _plan(self, i, group, config, index, params, grads, slots, step):
        where = self._where(i)
        return _core.plan_adagrad(params, grads, slots[0], config, step, where, index)


class LAMB(_Fused):
    """LAMB (You et al. 2020, Alg. 2): the Adam direction plus weight decay,
    r = (m/c1) / (sqrt(v/c2) + eps) + weight_decay p, scaled per parameter tensor by the trust
    ratio ||p|| / ||r|| (1 when either is 0). State: ``step``, ``exp_avg``, ``exp_avg_sq``. In
    flat mode each tensor keeps its own ratio (the flat buffer's tensor sizes)."""

    def __init__(self, params: Iterable, lr: LR = _LAMB.lr.value,
                 betas: Tuple[float, float] = (_LAMB.beta1, _LAMB.beta2), eps: float = _LAMB.eps,
                 weight_decay: float = _LAMB.weight_decay, *,
                 bias_correction: bool = _LAMB.bias_correction, flat: bool = False):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        bias_correction=bias_correction)
        super().__init__(params, defaults, flat)

    def _slots(self, group):
        return ("exp_avg", "exp_avg_sq")

    def _config(self, group):
        b1, b2 = group["betas"]
        return _core.LAMBConfig(lr=_lr(group["lr"]), beta1=b1, beta2=b2, eps=group["eps"],
                                weight_decay=group["weight_decay"],
                                bias_correction=bool(group.get("bias_correction", True)))

    def _plan(self, i, group, config, index, params, grads, slots, step):
        where = self._where(i)
        if index is None:  # flat: one buffer of the group's tensors, one ratio each
            config.tensor_sizes = self._flats[i].sizes
        return _core.plan_lamb(params, grads, slots[0], slots[1], config, step, where, index)
