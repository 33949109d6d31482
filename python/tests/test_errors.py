"""Bad input: a Python exception that names the argument and the rule, and nothing changed."""

import ctypes

import numpy as np
import pytest
import torch

import heterograd._core as core
import heterograd.optim as hgo
from helpers import assert_unchanged, make_grads, make_params, run, snapshot


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class CudaTensor:
    """What a CUDA tensor shows through DLPack (device type 2, kDLCUDA), without a GPU: the
    memory is host memory that the kernels must never be handed."""

    def __init__(self, n):
        self.host = np.zeros(n, np.float32)
        self.shape = (ctypes.c_int64 * 1)(n)
        self.managed = _DLManagedTensor(self.host.ctypes.data, _DLDevice(2, 0), 1,
                                        _DLDataType(2, 32, 1), self.shape, None, 0, None, None)

    def __dlpack__(self, stream=None):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                       ctypes.c_void_p]
        return new(ctypes.addressof(self.managed), b"dltensor", None)

    def __dlpack_device__(self):
        return (2, 0)


def plan_error(kind, **arrays):
    p = np.ones(8, np.float32)
    args = dict(params=[p], grads=[np.ones(8, np.float32)], m=[np.zeros(8, np.float32)],
                v=[np.zeros(8, np.float32)])
    args.update(arrays)
    before = [a.copy() for a in args["params"] if isinstance(a, np.ndarray)]
    with pytest.raises(kind) as e:
        core.plan_adam(args["params"], args["grads"], args["m"], args["v"],
                       core.AdamConfig(), 1, where="Adam.param_groups[0]").run()
    for a, b in zip(before, [a for a in args["params"] if isinstance(a, np.ndarray)]):
        assert np.array_equal(a, b)
    return str(e.value)


def test_the_kernels_refuse_what_they_cannot_update_in_place():
    ro = np.ones(8, np.float32)
    ro.flags.writeable = False
    msg = plan_error(ValueError, params=[ro])
    assert "'Adam.param_groups[0].params[0]' = a read-only array: must be writable" in msg
    msg = plan_error(ValueError, params=[np.ones(16, np.float32)[::2]])
    assert "'Adam.param_groups[0].params[0]' = a non-contiguous array: must be C-contiguous" in msg
    msg = plan_error(TypeError, params=[np.ones(8, np.float16)])
    assert "'Adam.param_groups[0].params[0]' = dtype float16: must be float32 or float64" in msg
    msg = plan_error(TypeError, grads=[np.ones(8, np.float64)])
    assert "'Adam.param_groups[0].grads[0]' = dtype float64: must be float32 like" in msg
    msg = plan_error(ValueError, v=[np.zeros(7, np.float32)])
    assert "'Adam.param_groups[0].v[0]' = 7 elements: must have as many as" in msg
    msg = plan_error(ValueError, m=[])
    assert "'Adam.param_groups[0].m' = 0 arrays: must hold one array per element of params" in msg
    msg = plan_error(TypeError, params=["weights"])
    assert "'Adam.param_groups[0].params[0]' = a str: must be an array" in msg


def test_cuda_memory_is_refused_by_name_in_a_build_without_cuda():
    assert core.cuda is False
    msg = plan_error(ValueError, params=[CudaTensor(8)])
    assert ("'Adam.param_groups[0].params[0]' = on cuda:0: must be in host memory: this build of "
            "heterograd runs on the CPU only (built without CUDA)") in msg


def test_the_configuration_and_the_step_index_are_checked():
    with pytest.raises(ValueError, match=r"'adam.eps' = 0: must be finite and > 0"):
        core.AdamConfig(eps=0.0).validate()
    with pytest.raises(ValueError, match=r"'Adam.param_groups\[0\].step' = 0: must be >= 1"):
        plan_error_step0()
    with pytest.raises(TypeError, match="adam has no field 'betas'"):
        core.AdamConfig(betas=(0.9, 0.99))
    with pytest.raises(ValueError, match=r"'Adam.param_groups\[0\].lr' = -1: must be finite"):
        hgo.Adam(make_params(), lr=-1.0)
    with pytest.raises(ValueError, match=r"'linear_warmup.warmup' = 0: must be >= 1"):
        hgo.linear_warmup(0.1, 0)
    with pytest.raises(ValueError, match="needs momentum > 0"):
        hgo.SGD(make_params(), lr=0.1, nesterov=True)


def test_lamb_tensor_sizes_must_tile_the_one_flat_array():
    p = np.ones(10, np.float32)
    z = [np.zeros(10, np.float32)]
    with pytest.raises(ValueError, match=r"'LAMB.tensor_sizes \(sum\)' = 9: must equal the size"):
        core.plan_lamb([p], [p.copy()], z, [z[0].copy()], core.LAMBConfig(tensor_sizes=[4, 5]), 1,
                       where="LAMB")
    with pytest.raises(ValueError, match=r"'LAMB.tensor_sizes \(count\)' = 2: must be empty"):
        core.plan_lamb([p, p.copy()], [p.copy(), p.copy()], z * 2, z * 2,
                       core.LAMBConfig(tensor_sizes=[5, 5]), 1, where="LAMB")
    assert np.array_equal(p, np.ones(10, np.float32))


def plan_error_step0():
    a = [np.ones(4, np.float32)]
    core.plan_adam(a, a, [np.zeros(4, np.float32)], [np.zeros(4, np.float32)], core.AdamConfig(),
                   0, where="Adam.param_groups[0]")


@pytest.mark.parametrize("flat", [False, True], ids=["tensors", "flat"])
def test_tensors_are_checked_at_construction(flat):
    cases = [
        (TypeError, torch.zeros(4, dtype=torch.float16), "= dtype float16: must be float32 or"),
        (TypeError, torch.zeros(4, dtype=torch.int64), "= dtype int64: must be float32 or"),
    ]
    if not flat:  # flat mode copies the tensors into its buffer: any layout will do
        cases.append((ValueError, torch.zeros(5, 4).t(), "= a non-contiguous array: must be C-"))
    with torch.inference_mode():
        cases.append((ValueError, torch.zeros(4), "= an inference tensor: must be writable"))
    for kind, bad, rule in cases:
        with pytest.raises(kind) as e:
            hgo.Adam(make_params() + [bad], flat=flat)
        assert "'Adam.param_groups[0].params[5]' " + rule in str(e.value), str(e.value)


def two_groups(flat):
    a, b = make_params(seed=0), make_params(seed=1)
    opt = hgo.Adam([{"params": a}, {"params": b, "lr": 1e-2}], flat=flat)
    run(opt, a + b, make_grads(3, shapes=[p.shape for p in a + b]))
    return a, b, opt


@pytest.mark.parametrize("flat", [False, True], ids=["tensors", "flat"])
def test_a_parameter_list_that_changes_size_is_refused_and_nothing_changes(flat):
    a, b, opt = two_groups(flat)
    extra = torch.nn.Parameter(torch.ones(3))
    extra.grad = torch.ones(3)
    opt.param_groups[1]["params"].append(extra)
    before = snapshot(a + b + [extra], opt)
    with pytest.raises(ValueError) as e:
        opt.step()
    assert ("'Adam.param_groups[1].params' = 6 tensors: must stay the 5 given at construction"
            in str(e.value))
    assert_unchanged(before, a + b + [extra], opt)


@pytest.mark.parametrize("flat", [False, True], ids=["tensors", "flat"])
def test_a_parameter_that_changes_size_is_refused_and_nothing_changes(flat):
    a, b, opt = two_groups(flat)
    b[2].data = torch.zeros(40)
    b[2].grad = torch.ones(40)
    before = snapshot(a + b, opt)
    with pytest.raises(ValueError) as e:
        opt.step()
    rule = ("must keep the 33 elements of torch.float32 laid out at construction" if flat else
            "must keep the size of its state 'exp_avg' (33)")
    assert "'Adam.param_groups[1].params[2]' = 40 elements" in str(e.value)
    assert rule in str(e.value), str(e.value)
    assert_unchanged(before, a + b, opt)


def test_a_bad_tensor_at_step_time_leaves_every_group_as_it_was():
    a, b, opt = two_groups(False)
    b[1].data = torch.zeros(10)[::2]  # five elements, not contiguous
    b[1].grad = torch.ones(5)
    before = snapshot(a + b, opt)
    with pytest.raises(ValueError) as e:
        opt.step()
    assert "'Adam.param_groups[1].params[1]' = a non-contiguous array" in str(e.value)
    assert_unchanged(before, a + b, opt)
    with torch.inference_mode():
        frozen = torch.zeros(5)
    b[1].data = frozen
    with pytest.raises(ValueError, match=r"params\[1\]' = an inference tensor: must be writable"):
        opt.step()
    assert_unchanged(before, a + b, opt)


def test_state_made_for_a_refused_step_is_unmade():
    fresh = torch.nn.Parameter(torch.zeros(2))
    bad = torch.nn.Parameter(torch.zeros(5))
    opt = hgo.Adam([{"params": [fresh]}, {"params": [bad]}])
    fresh.grad, bad.grad = torch.ones(2), torch.ones(5)
    bad.data = torch.zeros(10)[::2]  # refused by the extension, after group 0 made its state
    with pytest.raises(ValueError, match="non-contiguous"):
        opt.step()
    assert fresh not in opt.state and len(opt.state) == 0
    assert torch.equal(fresh.detach(), torch.zeros(2))


@pytest.mark.parametrize("flat", [False, True], ids=["tensors", "flat"])
def test_settings_changed_after_construction_are_checked_at_the_step(flat):
    a, b, opt = two_groups(flat)
    before = snapshot(a + b, opt)
    for key, value, rule in (("lr", -1.0, "lr' = -1: must be finite and >= 0"),
                             ("betas", (0.9, 1.0), "beta2' = 1: must be in [0, 1)"),
                             ("amsgrad", True, "amsgrad' = True: not available")):
        saved = dict(opt.param_groups[1])
        opt.param_groups[1][key] = value
        with pytest.raises(ValueError) as e:
            opt.step()
        assert "'Adam.param_groups[1]." + rule in str(e.value), str(e.value)
        opt.param_groups[1].clear()
        opt.param_groups[1].update(saved)
        assert_unchanged(before, a + b, opt)
