"""heterograd from Python: the library's fused optimizers as torch.optim optimizers.

    import heterograd.optim as hgo
    opt = hgo.Adam(model.parameters(), lr=1e-3, flat=True)

heterograd.optim needs PyTorch (any version with DLPack: arrays cross the boundary without a
copy); heterograd._core, the C++ extension, needs only the arrays. Not available from Python
yet: heterograd.sim (the simulator) and heterograd.distributed (the runtime's transports).
"""

from . import _core
from ._core import __version__

__all__ = ["__version__", "optim"]


def __getattr__(name):
    # heterograd.optim imports torch: only when asked for.
    if name == "optim":
        import importlib

        return importlib.import_module(".optim", __name__)
    raise AttributeError(f"module 'heterograd' has no attribute '{name}'")
