"""heterograd from Python: the library's fused optimizers as torch.optim optimizers, and its
simulator with a Python gradient function, and an asynchronous parameter server across MPI
processes.

    import heterograd.optim as hgo
    opt = hgo.Adam(model.parameters(), lr=1e-3, flat=True)

    import heterograd.sim as hgs
    r = hgs.simulate(hgs.Ringmaster(threshold=4), grad, x0, hgs.fixed_times([1, 2, 4]), 1e4, 1e-3)

    import heterograd.distributed as hgd   # under mpirun -np N
    with hgd.ParameterServer(model, method="ringmaster", lr=0.05, max_updates=1000) as ps:
        while ps.pull(): loss_fn(model(x), y).backward(); ps.push()

heterograd.optim needs PyTorch (any version with DLPack: arrays cross the boundary without a
copy); heterograd.sim needs numpy; heterograd._core, the C++ extension, needs only the arrays.
heterograd.distributed needs PyTorch and a build with MPI (docs/python.md says what it covers).
"""

from . import _core
from ._core import __version__

__all__ = ["__version__", "optim", "sim", "distributed"]


def __getattr__(name):
    # heterograd.optim imports torch: only when asked for (heterograd.sim and .distributed alike).
    if name in ("optim", "sim", "distributed"):
        import importlib

        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'heterograd' has no attribute '{name}'")
