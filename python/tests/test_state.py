"""state_dict and load_state_dict: round trips through bytes (bitwise), across the two modes,
and with torch.optim both ways; a bad state is refused whole. zero_grad and add_param_group."""

import copy
import io

import pytest
import torch

import heterograd.optim as hgo
from helpers import (CASES, TORCH_CASES, assert_bitwise, assert_unchanged, flat_of, make_grads,
                     make_params, run, snapshot)


def saved(opt):
    """The state as bytes and back (torch.save / torch.load: pickling, schedules included)."""
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    return torch.load(buf)


@pytest.mark.parametrize("modes", [(False, False), (True, True), (False, True), (True, False)],
                         ids=["tensors", "flat", "tensors_to_flat", "flat_to_tensors"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_saved_state_resumes_bitwise(name, modes):
    case, steps = CASES[name], 20
    grads = make_grads(steps)
    whole = make_params()
    run(case.ours(whole, False), whole, grads)

    first = make_params()
    state = saved(run(case.ours(first, modes[0]), first, grads, 0, 10))
    second = [p.detach().clone().requires_grad_() for p in first]
    opt = case.ours(second, modes[1])
    opt.load_state_dict(state)
    run(opt, second, grads, 10)
    assert_bitwise(flat_of(whole), flat_of(second), name)
    assert all(opt.state[p]["step"] == steps for p in second)


@pytest.mark.parametrize("flat", [False, True], ids=["tensors", "flat"])
@pytest.mark.parametrize("name", TORCH_CASES)
def test_states_move_between_torch_optim_and_ours(name, flat):
    case, grads = CASES[name], make_grads(20)
    reference = make_params()
    ref = run(case.torch(reference, False), reference, grads)

    # torch's first 10 steps, ours the next 10; then ours first and torch's after.
    a = make_params()
    ta = run(case.torch(a, False), a, grads, 0, 10)
    oa = case.ours(a, flat)
    oa.load_state_dict(saved(ta))
    run(oa, a, grads, 10)
    b = make_params()
    ob = run(case.ours(b, flat), b, grads, 0, 10)
    tb = case.torch(b, False)
    tb.load_state_dict(saved(ob))
    run(tb, b, grads, 10)
    for ps in (a, b):
        err = ((flat_of(ps) - flat_of(reference)).abs() / (1 + flat_of(reference).abs())).max()
        assert err.item() <= 1e-6, name
    for slot in case.slots:
        assert torch.allclose(flat_of(oa.state[p][slot] for p in a),
                              flat_of(ref.state[p][slot] for p in reference), 1e-6, 1e-6)


def test_a_schedule_survives_pickling_and_its_repr_reads_back():
    for s in (hgo.constant(0.5), hgo.linear_warmup(0.1, 10, 0.01), hgo.step_decay(0.1, 7, 0.5),
              hgo.cosine_decay(0.1, 30, 0.1, 5), hgo.inverse_sqrt(0.1, 4),
              hgo.inverse_time(0.1, 0.5)):
        assert copy.deepcopy(s) == s
        assert eval(repr(s), vars(hgo)) == s
    p = make_params()
    opt = hgo.Adam(p, lr=hgo.cosine_decay(1e-2, 100))
    assert saved(opt)["param_groups"][0]["lr"] == hgo.cosine_decay(1e-2, 100)


@pytest.mark.parametrize("flat", [False, True], ids=["tensors", "flat"])
def test_a_bad_state_is_refused_whole(flat):
    params, grads = make_params(), make_grads(5)
    opt = run(hgo.Adam(params, lr=1e-2, flat=flat), params, grads)
    good = opt.state_dict()
    cases = []
    short = copy.deepcopy(good)
    short["state"][2]["exp_avg"] = torch.zeros(3)
    cases.append((short, "state_dict.state[2].exp_avg' = 3", "must be a tensor of its parameter's 33"))
    bad_lr = copy.deepcopy(good)
    bad_lr["param_groups"][0]["lr"] = -1.0
    cases.append((bad_lr, "state_dict.param_groups[0].lr' = -1", "must be finite and >= 0"))
    amsgrad = copy.deepcopy(good)
    amsgrad["param_groups"][0]["amsgrad"] = True
    cases.append((amsgrad, "state_dict.param_groups[0].amsgrad' = True", "not available"))
    fewer = copy.deepcopy(good)
    fewer["param_groups"][0]["params"].pop()
    cases.append((fewer, "state_dict.param_groups[0].params' = 4 tensors", "must be 5"))
    if flat:
        steps = copy.deepcopy(good)
        steps["state"][1]["step"] = 3
        cases.append((steps, "state_dict.param_groups[0]' = steps [3, 5]", "one step count"))
    before = snapshot(params, opt)
    for state, name, rule in cases:
        with pytest.raises(ValueError) as e:
            opt.load_state_dict(state)
        assert name in str(e.value) and rule in str(e.value), str(e.value)
        assert_unchanged(before, params, opt)


def test_zero_grad_as_torch_in_per_tensor_mode_and_in_place_in_flat_mode():
    params = make_params()
    opt = hgo.SGD(params, lr=0.1)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in params)

    params = make_params()
    opt = hgo.SGD(params, lr=0.1, flat=True)
    flat_params, flat_grads = opt.flat_buffers()
    grads = [p.grad for p in params]
    flat_grads.fill_(1.0)
    opt.zero_grad(set_to_none=True)  # stays in the buffer: zeroed in place
    assert all(p.grad is g for p, g in zip(params, grads))
    assert flat_grads.abs().sum().item() == 0


@pytest.mark.parametrize("flat", [False, True], ids=["tensors", "flat"])
def test_add_param_group_checks_first_and_steps_the_new_group(flat):
    a, b = make_params(seed=0), make_params(seed=1)
    opt = hgo.Adam(a, lr=1e-2, flat=flat)
    with pytest.raises(ValueError, match=r"Adam.param_groups\[1\].beta1' = 1.5: must be in"):
        opt.add_param_group({"params": b, "betas": (1.5, 0.999)})
    assert len(opt.param_groups) == 1
    opt.add_param_group({"params": b, "lr": 1e-3})
    before = flat_of(b)
    run(opt, a + b, [[torch.ones_like(p) for p in a + b]])
    # Adam's first step moves every element by lr (sign of the gradient).
    assert torch.allclose(before - flat_of(b), torch.full_like(before, 1e-3), rtol=1e-4)
