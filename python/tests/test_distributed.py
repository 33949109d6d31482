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
