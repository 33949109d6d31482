"""heterograd from Python: the library's fused optimizers as torch.optim optimizers, and its
simulator with a Python gradient function.

    import heterograd.optim as hgo
    opt = hgo.Adam(model.parameters(), lr=1e-3, flat=True)

    import heterograd.sim as hgs
    r = hgs.simulate(hgs.Ringmaster(threshold=4), grad, x0, hgs.fixed_times([1, 2, 4]), 1e4, 1e-3)

heterograd.optim needs PyTorch (any version with DLPack: arrays cross the boundary without a
copy); heterograd.sim needs numpy; heterograd._core, the C++ extension, needs only the arrays.
Not available from Python yet: heterograd.distributed (the runtime's transports).
"""

from . import _core
from ._core import __version__

__all__ = ["__version__", "optim", "sim"]


def __getattr__(name):
    # heterograd.optim imports torch: only when asked for (heterograd.sim alike).
    if name in ("optim", "sim"):
        import importlib

        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'heterograd' has no attribute '{name}'")
