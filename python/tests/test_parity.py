"""The numbers: bitwise the C++ optimizers' (both modes, float32 and float64), the flat mode
bitwise the per-tensor mode, and within 1e-6 of torch.optim over 100 steps."""

import math

import numpy as np
import pytest
import torch

import heterograd._core as core
import heterograd.optim as hgo
from helpers import (CASES, TORCH_CASES, assert_bitwise, flat_of, make_grads,
                     make_params, run)

DTYPES = [torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("flat", [False, True], ids=["tensors", "flat"])
@pytest.mark.parametrize("name", list(CASES))
def test_bitwise_equal_to_the_cxx_optimizer(name, flat, dtype):
    case, steps = CASES[name], 30
    params, grads = make_params(dtype), make_grads(steps, dtype)
    start = flat_of(params).numpy().copy()
    opt = run(case.ours(params, flat), params, grads)

    # The C++ optimizer (optim::<kind>: init, then update per step) on the concatenation; LAMB
    # gets the tensors' sizes, so that each keeps its own trust ratio as here.
    sizes = [p.numel() for p in params]
    slots = [np.zeros_like(start) for _ in case.slots]
    count = core.reference_run(case.cxx_kind, case.cxx_config(sizes), start,
                               [flat_of(g).numpy() for g in grads], slots)
    assert count == steps
    assert_bitwise(flat_of(params), torch.from_numpy(start), f"{name} params")
    for k, slot in enumerate(case.slots):
        ours = flat_of(opt.state[p][slot] for p in params)
        assert_bitwise(ours, torch.from_numpy(slots[k]), f"{name} state '{slot}'")
    assert all(opt.state[p]["step"] == steps for p in params)


@pytest.mark.parametrize("name", list(CASES))
def test_flat_mode_is_bitwise_the_per_tensor_mode(name):
    case, steps = CASES[name], 25
    a, b, grads = make_params(), make_params(), make_grads(steps)
    oa = run(case.ours(a, False), a, grads)
    ob = run(case.ours(b, True), b, grads)
    assert_bitwise(flat_of(a), flat_of(b), name)
    for slot in case.slots:
        assert_bitwise(flat_of(oa.state[p][slot] for p in a),
                       flat_of(ob.state[p][slot] for p in b), f"{name} '{slot}'")


def close(ours, theirs, tol):
    """|ours - theirs| <= tol (1 + |theirs|) elementwise: relative where |theirs| >= 1 (the
    parameters here start as N(0, 1)), absolute below, where an element crossing zero would make
    a relative error meaningless."""
    err = (ours - theirs).abs() / (1 + theirs.abs())
    return err.max().item()


@pytest.mark.parametrize("foreach", [False, True], ids=["torch_single", "torch_foreach"])
@pytest.mark.parametrize("flat", [False, True], ids=["tensors", "flat"])
@pytest.mark.parametrize("name", TORCH_CASES)
def test_within_1e_6_of_torch_optim_over_100_steps(name, flat, foreach):
    case, steps = CASES[name], 100
    a, b, grads = make_params(), make_params(), make_grads(steps)
    oa = run(case.ours(a, flat), a, grads)
    ob = run(case.torch(b, foreach), b, grads)
    assert close(flat_of(a), flat_of(b), 1e-6) <= 1e-6, name
    moved = (flat_of(a) - flat_of(make_params())).abs().max().item()
    assert moved > 1e-2, f"{name} must move the parameters ({moved})"
    for slot in case.slots:
        err = close(flat_of(oa.state[p][slot] for p in a), flat_of(ob.state[p][slot] for p in b),
                     1e-6)
        assert err <= 1e-6, f"{name} state '{slot}': {err}"


@pytest.mark.parametrize("name", TORCH_CASES)
def test_float64_within_1e_12_of_torch_optim(name):
    case, steps = CASES[name], 100
    a, b = make_params(torch.float64), make_params(torch.float64)
    grads = make_grads(steps, torch.float64)
    run(case.ours(a, False), a, grads)
    run(case.torch(b, False), b, grads)
    assert close(flat_of(a), flat_of(b), 1e-12) <= 1e-12, name


def lamb_reference(params, grads, lr, b1, b2, eps, wd):
    """LAMB (You et al. 2020, Alg. 2) written out in torch float64, per tensor."""
    ps = [p.detach().clone().double() for p in params]
    m = [torch.zeros_like(p) for p in ps]
    v = [torch.zeros_like(p) for p in ps]
    for t, step in enumerate(grads, start=1):
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        for k, g in enumerate(step):
            g = g.double()
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g * g
            r = (m[k] / c1) / ((v[k] / c2).sqrt() + eps) + wd * ps[k]
            pn, rn = ps[k].norm().item(), r.norm().item()
            ratio = pn / rn if pn > 0 and rn > 0 else 1.0
            ps[k] = ps[k] - lr * ratio * r
    return ps


@pytest.mark.parametrize("flat", [False, True], ids=["tensors", "flat"])
def test_lamb_follows_the_paper_within_1e_10_in_float64(flat):
    steps = 100
    params, grads = make_params(torch.float64), make_grads(steps, torch.float64)
    expect = lamb_reference(params, grads, 1e-2, 0.9, 0.999, 1e-6, 0.01)
    run(hgo.LAMB(params, lr=1e-2, flat=flat), params, grads)
    assert close(flat_of(params), flat_of(expect), 1e-10) <= 1e-10


def test_schedules_are_the_library_formulas():
    cases = [
        (hgo.constant(0.3), lambda t: 0.3),
        (hgo.linear_warmup(0.1, 10, 0.01), lambda t: 0.01 + 0.09 * t / 10 if t < 10 else 0.1),
        (hgo.step_decay(0.1, 7, 0.5), lambda t: 0.1 * 0.5 ** (t // 7)),
        (hgo.cosine_decay(0.1, 30, 0.1, 5), lambda t: (
            0.1 * t / 5 if t < 5 else
            0.1 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(t - 5, 30) / 30))))),
        (hgo.inverse_sqrt(0.1, 4), lambda t: 0.1 * t / 4 if t < 4 else 0.1 * math.sqrt(4 / t)),
        (hgo.inverse_sqrt(0.1), lambda t: 0.1 / math.sqrt(t + 1)),
        (hgo.inverse_time(0.1, 0.5), lambda t: 0.1 / (1 + 0.5 * t)),
    ]
    for schedule, formula in cases:
        for t in range(50):
            assert schedule(t) == pytest.approx(formula(t), rel=1e-15, abs=1e-18), (schedule, t)


def test_a_schedule_matches_torch_lambda_lr_and_torch_schedulers_drive_ours():
    steps = 100
    sched = hgo.cosine_decay(1e-2, 60, 0.05, 10)
    a, b, grads = make_params(), make_params(), make_grads(steps)
    run(hgo.Adam(a, lr=sched), a, grads)
    tb = torch.optim.Adam(b, lr=1e-2)
    lam = torch.optim.lr_scheduler.LambdaLR(tb, lambda t: sched(t) / 1e-2)
    for step in grads:
        for p, g in zip(b, step):
            p.grad = g.clone()
        tb.step()
        lam.step()
    assert close(flat_of(a), flat_of(b), 1e-6) <= 1e-6

    # A torch scheduler writes group['lr'] of ours as of torch's optimizers.
    c, d = make_params(), make_params()
    oc, od = hgo.SGD(c, lr=0.05, momentum=0.9), torch.optim.SGD(d, lr=0.05, momentum=0.9)
    sc = torch.optim.lr_scheduler.StepLR(oc, 10, 0.5)
    sd = torch.optim.lr_scheduler.StepLR(od, 10, 0.5)
    for step in grads:
        for ps, opt, s in ((c, oc, sc), (d, od, sd)):
            for p, g in zip(ps, step):
                p.grad = g.clone()
            opt.step()
            s.step()
    assert oc.param_groups[0]["lr"] == od.param_groups[0]["lr"] < 0.05
    assert close(flat_of(c), flat_of(d), 1e-6) <= 1e-6
