"""Zero copy: the kernels read and write the memory the caller holds, through DLPack (torch)
and the buffer protocol (numpy). A copy anywhere would leave the caller's memory as it was."""

import numpy as np
import torch

import heterograd._core as core
import heterograd.optim as hgo


def test_the_kernels_see_the_callers_addresses():
    t = torch.randn(100)
    a = np.random.default_rng(0).standard_normal(100).astype(np.float32)
    assert core.check_array(t) == t.data_ptr()
    assert core.check_array(a) == a.ctypes.data
    view = t[10:60]
    assert core.check_array(view) == t.data_ptr() + 10 * 4
    p = torch.nn.Parameter(torch.randn(3, 4))  # requires grad: exported through a detach()
    assert core.check_array(p.detach()) == p.data_ptr()


def test_a_step_writes_into_the_storage_the_user_holds():
    # The parameter is a window of a larger buffer: the step must change exactly that window,
    # in the buffer itself.
    base = torch.zeros(40)
    p = torch.nn.Parameter(base[10:30])
    assert p.data_ptr() == base.data_ptr() + 10 * 4
    p.grad = torch.ones(20)
    opt = hgo.SGD([p], lr=0.5)
    opt.step()
    assert p.data_ptr() == base.data_ptr() + 10 * 4
    assert torch.equal(base[10:30], torch.full((20,), -0.5))
    assert base[:10].abs().sum() == 0 and base[30:].abs().sum() == 0
    # The state lives where the optimizer keeps it and is updated there too.
    opt = hgo.Adam([p], lr=0.1)
    opt.step()
    m = opt.state[p]["exp_avg"]
    address = m.data_ptr()
    opt.step()
    assert m.data_ptr() == address and opt.state[p]["exp_avg"] is m


def test_numpy_arrays_are_updated_in_place_and_read_only_grads_are_read():
    buf = np.zeros(30, np.float32)
    params = buf[10:20]  # a view: a copy would leave buf unchanged
    grads = np.ones(10, np.float32)
    grads.flags.writeable = False
    core.plan_sgd([params], [grads], core.SGDConfig(lr=0.25), 1).run()
    assert np.array_equal(buf[10:20], np.full(10, -0.25, np.float32))
    assert not buf[:10].any() and not buf[20:].any()


def test_flat_mode_lays_the_model_over_one_buffer_that_autograd_and_the_step_write():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    values = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    opt = hgo.SGD(model.parameters(), lr=0.1, flat=True)
    flat_params, flat_grads = opt.flat_buffers()
    assert torch.equal(flat_params, values)  # laid out with the model's values, in order
    start, itemsize = flat_params.data_ptr(), flat_params.element_size()
    offset = 0
    for p in model.parameters():
        assert p.data_ptr() == start + offset * itemsize
        assert p.grad.data_ptr() == flat_grads.data_ptr() + offset * itemsize
        offset += p.numel()
    assert offset == flat_params.numel()

    loss = model(torch.randn(16, 4)).pow(2).sum()
    loss.backward()  # autograd accumulates into the views: the flat buffer holds the gradient
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    assert torch.equal(flat_grads, grads) and flat_grads.abs().sum() > 0
    expect = flat_params - 0.1 * flat_grads
    opt.step()
    assert torch.equal(flat_params, expect)
    assert torch.equal(torch.cat([p.detach().reshape(-1) for p in model.parameters()]), expect)


def test_flat_mode_takes_back_a_gradient_set_to_none_or_replaced():
    params = [torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))]
    opt = hgo.SGD(params, lr=1.0, flat=True)
    flat_params, flat_grads = opt.flat_buffers()
    params[0].grad = None              # torch 2's module.zero_grad() does this
    params[1].grad = torch.ones(2)     # a new tensor, outside the buffer
    flat_grads.fill_(7.0)
    opt.step()
    assert torch.equal(flat_params, torch.tensor([0.0, 0.0, 0.0, -1.0, -1.0]))
    assert params[0].grad.data_ptr() == flat_grads.data_ptr()
    assert params[1].grad.data_ptr() == flat_grads.data_ptr() + 3 * 4
    params[1].data = torch.full((2,), 5.0)  # replaced values come back into the buffer
    opt.zero_grad()
    opt.step()
    assert torch.equal(flat_params[3:], torch.full((2,), 5.0))
    assert params[1].data_ptr() == flat_params.data_ptr() + 3 * 4
