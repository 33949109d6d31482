#!/usr/bin/env python3
"""heterograd's fused Adam on a NumPy array, through the C API and ctypes.

The optimizer updates the array in place (heterograd works on the array's own memory), and
errors come back as status codes with a message. With --reference, the same steps run through
heterograd's C++ API (hg-adam-reference) and the two results must be equal bitwise.

    python3 adam_numpy.py --lib build/cpu-omp/examples/python/libheterograd_c.so \
        [--reference build/cpu-omp/examples/python/hg-adam-reference]
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np

HG_FLOAT32, HG_FLOAT64 = 0, 1
HG_DEVICE_HOST = 0
HG_OPTIMIZER_ADAM, HG_OPTIMIZER_ADAMW = 3, 4


class OptimizerConfig(ctypes.Structure):
    """hg_optimizer_config (heterograd/c/heterograd.h), field for field."""
    _fields_ = [("kind", ctypes.c_int32), ("bias_correction", ctypes.c_int32),
                ("lr", ctypes.c_double), ("weight_decay", ctypes.c_double),
                ("momentum", ctypes.c_double), ("dampening", ctypes.c_double),
                ("beta1", ctypes.c_double), ("beta2", ctypes.c_double), ("eps", ctypes.c_double)]


class HeterogradError(RuntimeError):
    def __init__(self, lib, status):
        self.status = status
        name = lib.hg_status_name(status).decode()
        super().__init__(f"{name}: {lib.hg_last_error().decode()}")


def load(path):
    lib = ctypes.CDLL(path)
    lib.hg_last_error.restype = ctypes.c_char_p
    lib.hg_status_name.restype = ctypes.c_char_p
    lib.hg_status_name.argtypes = [ctypes.c_int]
    lib.hg_optimizer_config_init.argtypes = [ctypes.POINTER(OptimizerConfig), ctypes.c_int32]
    lib.hg_optimizer_create.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                        ctypes.POINTER(OptimizerConfig), ctypes.c_int32,
                                        ctypes.c_size_t, ctypes.c_int32]
    lib.hg_optimizer_step.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                      ctypes.c_size_t, ctypes.c_int32]
    lib.hg_optimizer_step_count.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)]
    lib.hg_optimizer_destroy.argtypes = [ctypes.c_void_p]
    for f in ("hg_optimizer_config_init", "hg_optimizer_create", "hg_optimizer_step",
              "hg_optimizer_step_count", "hg_optimizer_destroy"):
        getattr(lib, f).restype = ctypes.c_int
    return lib


def check(lib, status):
    if status != 0:
        raise HeterogradError(lib, status)


class Adam:
    """A fused Adam (or AdamW) over float32/float64 NumPy arrays of one size."""

    def __init__(self, lib, size, dtype, lr, beta1, beta2, eps, weight_decay, decoupled=False):
        self.lib, self.size, self.dtype = lib, size, np.dtype(dtype)
        kind = HG_OPTIMIZER_ADAMW if decoupled else HG_OPTIMIZER_ADAM
        cfg = OptimizerConfig()
        check(lib, lib.hg_optimizer_config_init(ctypes.byref(cfg), kind))
        cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay = lr, beta1, beta2, eps, weight_decay
        code = HG_FLOAT64 if self.dtype == np.float64 else HG_FLOAT32
        self.handle = ctypes.c_void_p()
        check(lib, lib.hg_optimizer_create(ctypes.byref(self.handle), ctypes.byref(cfg), code,
                                           size, HG_DEVICE_HOST))

    def step(self, params, grads):
        # The C API takes raw pointers: the arrays must be contiguous and of our dtype, or
        # the pointer would not describe them (NumPy would have to copy).
        for a in (params, grads):
            if a.dtype != self.dtype or not a.flags["C_CONTIGUOUS"]:
                raise TypeError("arrays must be C-contiguous " + str(self.dtype))
        if not params.flags["WRITEABLE"]:
            raise TypeError("params must be writeable (updated in place)")
        check(self.lib, self.lib.hg_optimizer_step(self.handle, params.ctypes.data,
                                                   grads.ctypes.data, params.size,
                                                   HG_DEVICE_HOST))

    def steps(self):
        n = ctypes.c_int64()
        check(self.lib, self.lib.hg_optimizer_step_count(self.handle, ctypes.byref(n)))
        return n.value

    def close(self):
        if self.handle:
            check(self.lib, self.lib.hg_optimizer_destroy(self.handle))
            self.handle = ctypes.c_void_p()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=os.environ.get("HG_C_LIBRARY", "libheterograd_c.so"),
                    help="path of libheterograd_c.so (or $HG_C_LIBRARY)")
    ap.add_argument("--reference", help="hg-adam-reference: check the result bitwise")
    ap.add_argument("--size", type=int, default=100003)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(4), "little"))
    args = ap.parse_args()
    lib = load(args.lib)
    print(f"seed {args.seed} (replay with --seed {args.seed})")
    rng = np.random.default_rng(args.seed)

    failures = 0
    hp = dict(lr=3e-3, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=1e-2)
    for dtype in (np.float32, np.float64):
        for decoupled in (False, True):
            name = ("adamw" if decoupled else "adam") + " " + np.dtype(dtype).name
            params = rng.standard_normal(args.size).astype(dtype)
            grads = rng.standard_normal((args.steps, args.size)).astype(dtype)
            start = params.copy()
            opt = Adam(lib, args.size, dtype, decoupled=decoupled, **hp)
            address = params.ctypes.data
            for s in range(args.steps):
                opt.step(params, grads[s])
            assert params.ctypes.data == address  # updated in place, never copied
            moved = float(np.abs(params - start).max())
            print(f"{name}: {opt.steps()} steps on {args.size} elements, max |change| {moved:.3g}")

            # Bad input comes back as an error with a message, never an abort.
            try:
                opt.step(params[:-1], grads[0][:-1])
            except HeterogradError as e:
                print(f"  wrong size  -> {e}")
                assert e.status == 2  # HG_ERROR_SIZE_MISMATCH
            else:
                raise AssertionError("a wrong size was accepted")
            # NumPy makes views at any byte offset; a misaligned one is refused, not read.
            raw = np.zeros(args.size * params.itemsize + 1, dtype=np.uint8)
            odd = raw[1:].view(dtype)
            assert not odd.flags["ALIGNED"]
            try:
                opt.step(odd, grads[0])
            except HeterogradError as e:
                print(f"  misaligned  -> {e}")
                assert e.status == 4  # HG_ERROR_INVALID_ARGUMENT
            else:
                raise AssertionError("a misaligned array was accepted")
            assert not raw.any()  # untouched
            opt.close()
            try:
                opt.handle = ctypes.c_void_p(address)  # a forged handle
                opt.step(params, grads[0])
            except HeterogradError as e:
                print(f"  bad handle  -> {e}")
                assert e.status == 3  # HG_ERROR_UNKNOWN_HANDLE
            opt.handle = ctypes.c_void_p()

            if args.reference:
                with tempfile.TemporaryDirectory() as d:
                    src, dst = os.path.join(d, "in.bin"), os.path.join(d, "out.bin")
                    with open(src, "wb") as f:
                        f.write(start.tobytes())
                        f.write(grads.tobytes())
                    cmd = [args.reference, np.dtype(dtype).name, str(args.size), str(args.steps),
                           src, dst] + [repr(hp[k]) for k in
                                        ("lr", "beta1", "beta2", "eps", "weight_decay")]
                    if decoupled:
                        cmd.append("adamw")
                    subprocess.run(cmd, check=True)
                    ref = np.fromfile(dst, dtype=dtype)
                # Bitwise: compare the bit patterns, not the values (NaN, -0).
                same = ref.size == params.size and np.array_equal(
                    ref.view(np.uint8), params.view(np.uint8))
                diff = np.count_nonzero(ref != params) if ref.size == params.size else -1
                print(f"  C++ API     -> {'bitwise equal' if same else f'DIFFERENT ({diff} elements)'}")
                failures += 0 if same else 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
