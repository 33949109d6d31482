"""heterograd.distributed's argument checks, in one process (no mpirun): every broken rule is a
Python exception naming the argument, the value and the rule, raised before MPI is touched and
before the caller's tensors change. The runs themselves are test_distributed_mpi.py's."""

import numpy as np
import pytest
import torch

import heterograd._core as core
import heterograd.distributed as hgd


def params():
    torch.manual_seed(0)
    return [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(5))]


def raised(kind, *args, **kw):
    with pytest.raises(kind) as e:
        hgd.ParameterServer(*args, **kw)
    return str(e.value)


def test_bad_parameter_tensors_are_named_with_their_rule():
    ps = params()
    msg = raised(ValueError, [ps[0], torch.ones(4, 4).t()], max_updates=10)
    assert "'ParameterServer.params[1]' = a non-contiguous array: must be C-contiguous" in msg
    msg = raised(TypeError, [ps[0], torch.ones(3, dtype=torch.float64)], max_updates=10)
    assert "'ParameterServer.params[1]' = dtype float64: must be float32" in msg
    ro = np.ones(6, np.float32)
    ro.flags.writeable = False
    msg = raised(ValueError, [ro], max_updates=10)
    assert "'ParameterServer.params[0]' = a read-only array: must be writable" in msg
    msg = raised(TypeError, [np.ones(6, np.float32)], max_updates=10)
    assert "'ParameterServer.params[0]' = a numpy.ndarray: must be a torch.Tensor" in msg
    msg = raised(ValueError, [], max_updates=10)
    assert "'ParameterServer.params' = an empty list: must hold at least one tensor" in msg


def test_unknown_method_and_bad_policy_parameters_are_named():
    msg = raised(ValueError, params(), method="ringmastr", max_updates=10)
    assert "'method' = 'ringmastr': must be one of asgd," in msg and "ringmaster" in msg
    assert "local_sgd" not in msg  # round methods have no parameter server
    msg = raised(ValueError, params(), method="ringmaster", max_updates=10, threshold=0)
    assert "'ringmaster.threshold' = 0: must be >= 1" in msg
    msg = raised(TypeError, params(), method="ringmaster", max_updates=10, treshold=3)
    assert "'ringmaster.treshold' = 3: is not a parameter of ringmaster (its parameters: threshold, variant)" in msg
    msg = raised(ValueError, params(), method="ringmaster", max_updates=10, variant="x")
    assert "'ringmaster.variant' = 'x': must be one of" in msg


def test_a_run_without_a_stopping_rule_or_with_a_bad_timeout_is_refused():
    msg = raised(ValueError, params(), max_updates=None)
    assert "'max_updates' = None: must be given (> 0) unless horizon" in msg
    msg = raised(ValueError, params(), max_updates=5, timeout=0.0)
    assert "'timeout' = 0: must be finite and > 0" in msg
    msg = raised(ValueError, params(), max_updates=-3)
    assert "'max_updates' = -3: must be None or an integer > 0" in msg
    msg = raised(ValueError, params(), max_updates=5, horizon=-1.0)
    assert "'horizon' = -1: must be finite and >= 0" in msg
    msg = raised(ValueError, params(), max_updates=5, lr=-1.0)
    assert "'lr' = -1: must be finite and >= 0" in msg


def test_a_refused_server_leaves_the_tensors_as_they_were():
    ps = params()
    before = [(p.data_ptr(), p.detach().clone()) for p in ps]
    raised(ValueError, ps, method="ringmaster", max_updates=10, threshold=0)
    for p, (ptr, v) in zip(ps, before):
        assert p.data_ptr() == ptr and torch.equal(p.detach(), v) and p.grad is None


def test_the_good_configuration_comes_back_with_its_defaults():
    s = hgd.ParameterServer(params(), method="ringmaster", max_updates=10, threshold=3)
    assert s.config == {"threshold": 3, "variant": "discard"}
    assert [m[0] for m in hgd.methods()][:4] == ["asgd", "delay_adaptive", "staleness_scaled", "ringmaster"]


@pytest.mark.skipif(not core.mpi, reason="built without MPI")
def test_a_process_not_started_by_mpirun_is_told_how_to_launch(monkeypatch):
    for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(RuntimeError, match="not started by mpirun.*mpirun -np N python"):
        with hgd.ParameterServer(params(), max_updates=10):
            pass


@pytest.mark.skipif(core.mpi, reason="built with MPI")
def test_a_build_without_mpi_refuses_by_name():
    with pytest.raises(RuntimeError, match="built without MPI"):
        with hgd.ParameterServer(params(), max_updates=10):
            pass


# ---- LocalSGD ------------------------------------------------------------------------------


def local_raised(kind, *args, **kw):
    ps = params()
    with pytest.raises(kind) as e:
        hgd.LocalSGD(ps, torch.optim.SGD(ps, lr=0.1), *args, **kw)
    return str(e.value)


def test_local_sgd_refuses_bad_steps_weights_and_outer_optimizers_by_name():
    assert "'local_steps' = 0: must be >= 1 (local steps per round, H)" in local_raised(ValueError, 0)
    assert "'local_steps' = -2: must be >= 1" in local_raised(ValueError, -2)
    assert "'local_steps' = 2.5: must be an integer >= 1" in local_raised(TypeError, 2.5)
    assert "'weight' = -1: must be finite and > 0" in local_raised(ValueError, 4, weight=-1)
    assert "'weight' = nan: must be finite and > 0" in local_raised(ValueError, 4, weight=float("nan"))
    assert "'weight' = 0: must be finite and > 0" in local_raised(ValueError, 4, weight=0)
    assert "'weight' = '8': must be a number" in local_raised(TypeError, 4, weight="8")
    assert "'outer_lr' = 0: must be finite and > 0" in local_raised(ValueError, 4, outer="diloco", outer_lr=0.0)
    assert "'outer_lr' = -0.5: must be finite and > 0" in local_raised(ValueError, 4, outer="sgd", outer_lr=-0.5)
    assert "'outer_lr' = inf: must be finite and > 0" in local_raised(ValueError, 4, outer="fedavgm",
                                                                      outer_lr=float("inf"))
    assert "'outer_momentum' = 1: must be in [0, 1)" in local_raised(ValueError, 4, outer="diloco", outer_momentum=1.0)
    msg = local_raised(ValueError, 4, outer="dilco")
    assert "'outer' = 'dilco': must be one of None, 'diloco', 'fedavgm', 'sgd'" in msg
    assert "'outer_lr' = 0.5: must be None when outer is None" in local_raised(ValueError, 4, outer_lr=0.5)
    assert "'outer_momentum' = 0.5: must be None with outer 'sgd'" in local_raised(ValueError, 4, outer="sgd",
                                                                                  outer_momentum=0.5)
    assert "'timeout' = 0: must be finite and > 0" in local_raised(ValueError, 4, timeout=0)
    ps = params()
    with pytest.raises(TypeError, match="'optimizer' = a list: must have step\\(\\) and zero_grad\\(\\)"):
        hgd.LocalSGD(ps, [1, 2])
    with pytest.raises(TypeError, match="'LocalSGD.params\\[1\\]' = dtype float64: must be float32"):
        hgd.LocalSGD([ps[0], torch.ones(3, dtype=torch.float64)], torch.optim.SGD(ps, lr=0.1))


def test_local_sgd_fills_in_the_outer_optimizers_defaults():
    ps = params()
    opt = torch.optim.SGD(ps, lr=0.1)
    assert hgd.LocalSGD(ps, opt, 4).config == {"local_steps": 4, "weight": 1.0, "outer": None, "outer_lr": None,
                                               "outer_momentum": None, "timeout": 120.0}
    c = hgd.LocalSGD(ps, opt, 4, weight=24, outer="diloco").config
    assert (c["weight"], c["outer"], c["outer_lr"], c["outer_momentum"]) == (24.0, "diloco", 0.7, 0.9)
    c = hgd.LocalSGD(ps, opt, 4, outer="fedavgm", outer_lr=0.5).config
    assert (c["outer_lr"], c["outer_momentum"]) == (0.5, 0.9)
    assert hgd.LocalSGD(ps, opt, 4, outer="sgd").config["outer_lr"] == 1.0


@pytest.mark.skipif(not core.mpi, reason="built without MPI")
def test_local_sgd_refuses_a_parameter_resized_after_construction_before_mpi():
    ps = params()
    ls = hgd.LocalSGD(ps, torch.optim.SGD(ps, lr=0.1), 4)
    ps[1].data = torch.zeros(7)
    before = [(p.data_ptr(), p.detach().clone()) for p in ps]
    with pytest.raises(ValueError, match="'LocalSGD.params\\[1\\]' = 7 elements: must keep the 5 it had"):
        with ls:
            pass
    for p, (ptr, v) in zip(ps, before):
        assert p.data_ptr() == ptr and torch.equal(p.detach(), v)
    with pytest.raises(RuntimeError, match="LocalSGD is used outside its `with` block"):
        ls.step()
