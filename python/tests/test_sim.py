"""heterograd.sim: the library's simulator with a Python gradient function.

E1 (docs/experiments.md, docs/references.md) through a Python callback, bitwise equal to
heterograd-run's run of the same configuration (final x, trace hash, updates); a Python callback against the same problem computed in C++ (bitwise);
bad callbacks and bad configurations (exceptions naming the argument and the rule, nothing
changed); Ctrl-C; the example at a tiny size.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import heterograd.sim as hgs

E1_C = np.array([0.0, 1.0, 2.0, 3.0])
E1_TAU = [1.0, 2.0, 4.0, 8.0]


def e1_grad(x, worker, job):
    # heterograd-run's scalar_quadratics: x - c_i in double, rounded to the model's dtype.
    return x.astype(np.float64) - E1_C[worker]


def e1_run(method, grad):
    # examples/experiments/e1_rescaled.json: float32, SGD lr 1e-4, horizon 2e5, fixed tau.
    return hgs.simulate(method, grad, np.zeros(1, np.float32), hgs.fixed_times(E1_TAU),
                        horizon=2e5, lr=1e-4, eval_interval=5000)


# docs/experiments.md, E1 "Ours": heterograd-run's final x (5 digits; IA2SGD to 8), and the
# paper's fixed points: sum(c/tau)/sum(1/tau) for vanilla ASGD, the mean of c for the others.
# heterograd-run's own run of examples/experiments/e1_rescaled.json (2026-12-07, main at
# 531e275: `heterograd-run examples/experiments/e1_rescaled.json --out DIR`, each method's
# summary.json): final x (float32, printed in full), trace hash, updates applied and buffered.
E1_CASES = [
    ("vanilla ASGD", lambda: hgs.ASGD(), 0.73344, 1e-5,
     (0.7334352135658264, 0x87cf439b8b996a2b, 375000, 0)),
    ("Rescaled ASGD", lambda: hgs.RescaledASGD(initial_tau=E1_TAU), 1.50056, 1e-5,
     (1.5005569458007812, 0x87cf439b8b996a2b, 375000, 0)),
    ("IA2SGD", lambda: hgs.IA2SGD(), 1.4994076, 1e-7,
     (1.4994076490402222, 0xfa4801c8f8dbda77, 374988, 12)),
    ("Ringleader", lambda: hgs.Ringleader(), 1.49940, 1e-5,
     (1.4994043111801147, 0x3f931ba2adf0a559, 100000, 275000)),
]


@pytest.mark.parametrize("label,method,documented,tol,driver", E1_CASES, ids=[c[0] for c in E1_CASES])
def test_e1_fixed_points_through_a_python_callback(label, method, documented, tol, driver):
    r = e1_run(method(), e1_grad)
    x = float(r.x[0])
    assert abs(x - documented) <= tol, f"{label}: x = {x!r}, docs/experiments.md: {documented}"
    theory = (np.sum(E1_C / E1_TAU) / np.sum(1 / np.array(E1_TAU)) if label == "vanilla ASGD"
              else E1_C.mean())
    assert abs(x - theory) < 1e-3
    # heterograd-run on the same configuration: the same bits and the same schedule.
    assert (x, r.trace_hash, r.updates, int(r.buffered.sum())) == driver
    # The same run with the gradient computed in C++ (heterograd-run's arithmetic): bitwise.
    c = e1_run(method(), hgs.scalar_quadratics(list(E1_C)))
    assert r.x.tobytes() == c.x.tobytes() and r.trajectory.tobytes() == c.trajectory.tobytes()
    assert r.trace_hash == c.trace_hash and r.updates == c.updates
    if label == "IA2SGD":  # docs: 374 988 updates in 375 000 arrivals
        assert r.updates == 374988 and r.jobs_finished.sum() == 375000


def worst_case_grad(dim, smoothness=1.0):
    """data/synthetic.hpp's worst-case quadratic in numpy, in the C++ loop's order: in
    double, g_j = s (2 x_j - x_{j-1} - x_{j+1}) + [j == 0] s, s = L / 4."""
    s = smoothness / 4
    b = np.zeros(dim)
    b[0] = s

    def grad(x, worker, job):
        x = x.astype(np.float64)
        ax = 2 * x
        ax[1:] -= x[:-1]
        ax[:-1] -= x[1:]
        return s * ax + b

    return grad


PARITY = [
    lambda n: hgs.Ringmaster(threshold=3, variant="interrupt"),
    lambda n: hgs.Ringmaster(threshold=3),
    lambda n: hgs.Rennala(batch=3),
    lambda n: hgs.DelayAdaptiveASGD(),
    lambda n: hgs.FedBuff(buffer=3),
    lambda n: hgs.DCASGD(),
    lambda n: hgs.SSP(staleness=2),
    lambda n: hgs.Malenia(threshold=2.0),
    lambda n: hgs.LocalSGD(period=2),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("make", PARITY, ids=lambda m: repr(m(6)))
def test_python_callback_equals_the_cxx_problem_bitwise(make, dtype):
    n, d = 6, 20
    times = hgs.sqrt_times(n, 3) + hgs.half_normal_noise(3)
    x0 = np.full(d, 0.5, dtype)
    runs = [hgs.simulate(make(n), g, x0, times, horizon=300.0, lr=0.5, eval_interval=10.0)
            for g in (worst_case_grad(d), hgs.worst_case_quadratic(d))]
    py, cxx = runs
    assert py.updates > 20 and py.trajectory.shape == (31, d) and py.x.dtype == dtype
    assert py.trajectory.tobytes() == cxx.trajectory.tobytes()
    assert py.x.tobytes() == cxx.x.tobytes() and py.trace_hash == cxx.trace_hash
    for k in ("applied", "buffered", "discarded", "interrupted", "jobs_finished", "busy"):
        assert np.array_equal(getattr(py, k), getattr(cxx, k)), k
    assert not np.array_equal(py.trajectory[0], py.trajectory[-1])  # it moved


def test_local_sgd_equals_its_rounds_written_in_numpy():
    # f_w(x) = |x - c_w|^2 / 2, H local SGD steps per round from the common model, then the
    # uniform average: after a round x <- mean_w(c_w + (1 - lr)^H (x - c_w)) per coordinate.
    # Fixed times (1, 2, 3, 4) and H = 4: a round lasts 16 (the slowest worker's 4 steps).
    c = np.array([[0.0, 1.0], [1.0, -1.0], [2.0, 0.5], [4.0, 2.0]])
    lr, h = 0.05, 4
    r = hgs.simulate(hgs.LocalSGD(period=h), lambda x, w, k: x - c[w], np.zeros(2),
                     [1.0, 2.0, 3.0, 4.0], horizon=200, lr=lr, eval_interval=16)
    x = np.zeros(2)
    anchors = [x.copy()]
    for _ in range(12):
        x = np.mean([cw + (1 - lr) ** h * (x - cw) for cw in c], axis=0)
        anchors.append(x.copy())
    assert r.updates == 12 and r.applied.tolist() == [12] * 4
    assert np.allclose(r.x, anchors[-1], rtol=0, atol=1e-12)
    # The evaluation at t = 16 k sees round k's synchronisation (events at t are in).
    assert np.allclose(r.trajectory, anchors[:13], rtol=0, atol=1e-12)
    # At the barrier: 12 rounds of 16 - 4 tau_w, then round 13's from its end to t = 200.
    assert np.array_equal(r.waiting, [148.0, 96.0, 48.0, 0.0])
    with pytest.raises(ValueError, match="'local_sgd.period' = 0: must be >= 1"):
        hgs.LocalSGD(period=0)


def test_a_run_repeats_exactly_and_the_outcomes_add_up():
    n = 5
    times = hgs.sqrt_times(n, 7) + hgs.half_normal_noise(7)
    a, b = (hgs.simulate(hgs.Ringmaster(threshold=2, variant="interrupt"), worst_case_grad(8),
                         np.ones(8), times, horizon=200.0, lr=0.3) for _ in range(2))
    assert a.trace_hash == b.trace_hash and a.x.tobytes() == b.x.tobytes()
    # Ringmaster with calculation stops: every applied delay < R, and jobs = finished + stopped.
    assert len(a.staleness["applied"]) <= 2 and a.interrupted.sum() > 0
    assert a.applied.sum() == a.updates
    assert np.array_equal(a.jobs_cancelled, a.interrupted)
    assert np.allclose(a.busy + a.idle + a.waiting, a.end_time)


def test_x_is_a_read_only_view_and_eval_records_metrics():
    seen = []

    def grad(x, worker, job):
        seen.append(x.flags.writeable)
        with pytest.raises(ValueError):
            x[0] = 1.0
        return x - 1.0

    r = hgs.simulate(hgs.ASGD(), grad, np.zeros(3), [1.0, 3.0], horizon=10.0, lr=0.1,
                     eval_interval=2.5, eval=lambda x: (float(x.sum()), float(x.max())))
    assert seen and not any(seen)
    assert np.array_equal(r.times, [0.0, 2.5, 5.0, 7.5, 10.0])
    assert r.metrics.shape == (5, 2) and r.trajectory.shape == (5, 3)
    assert np.array_equal(r.metrics[:, 0], r.trajectory.sum(axis=1))


def test_method_configs_come_from_the_library():
    assert hgs.Ringmaster().config == {"threshold": 6, "variant": "discard"}  # ringmaster_config
    assert hgs.Rennala().config == {"batch": 6, "stop_stale": True}
    assert hgs.Ringmaster.fields == ("threshold", "variant")
    assert "R: delay threshold" in hgs.Ringmaster.__doc__
    assert set(hgs.methods) >= {"asgd", "ringmaster", "rennala", "rescaled", "ia2sgd",
                                "ringleader", "fedbuff", "dc_asgd", "ssp", "dssp", "malenia"}
    a = hgs.simulate("ringmaster", worst_case_grad(4), np.ones(4), [1, 2, 3], 50, 0.3,
                     config={"threshold": 2})
    b = hgs.simulate(hgs.Ringmaster(threshold=2), worst_case_grad(4), np.ones(4), [1, 2, 3], 50, 0.3)
    assert a.trace_hash == b.trace_hash


@pytest.mark.parametrize("kwargs,kind,words", [
    (dict(threshold=0), ValueError, ["'ringmaster.threshold' = 0", "must be >= 1"]),
    (dict(R=4), TypeError, ["'ringmaster.R' = 4", "is not a parameter", "threshold, variant"]),
    (dict(variant="stop"), ValueError, ["'ringmaster.variant' = 'stop'", "discard, interrupt"]),
    (dict(threshold=2.5), TypeError, ["'ringmaster.threshold' = 2.5", "must be an integer"]),
])
def test_bad_config_names_key_value_and_rule(kwargs, kind, words):
    with pytest.raises(kind) as e:
        hgs.Ringmaster(**kwargs)
    for w in words:
        assert w in str(e.value)


def test_bad_config_values_of_other_methods():
    with pytest.raises(ValueError, match=r"'rescaled.ema' = 2: must be in \(0, 1\]"):
        hgs.RescaledASGD(ema=2.0)
    with pytest.raises(ValueError, match=r"initial_tau\[1\]' = -1: must be finite and > 0"):
        hgs.RescaledASGD(initial_tau=[1.0, -1.0])
    with pytest.raises(ValueError, match="'method' = 'ringmastr': must be one of asgd, "):
        hgs.simulate("ringmastr", e1_grad, np.zeros(1), [1.0], 10, 0.1)
    with pytest.raises(ValueError, match="'nonfinite' = 'ignore': must be one of fail, skip, zero"):
        hgs.simulate(hgs.ASGD(), e1_grad, np.zeros(1), [1.0], 10, 0.1, nonfinite="ignore")
    with pytest.raises(ValueError, match="'workers' = 3: must equal the time model's number of workers \\(2\\)"):
        hgs.simulate(hgs.ASGD(), e1_grad, np.zeros(1), [1.0, 2.0], 10, 0.1, workers=3)
    with pytest.raises(ValueError, match="'workers' = None: must be given"):
        hgs.simulate(hgs.ASGD(), e1_grad, np.zeros(1), hgs.constant_time(1.0), 10, 0.1)
    with pytest.raises(ValueError, match="'lr' = -1: must be finite and >= 0"):
        hgs.simulate(hgs.ASGD(), e1_grad, np.zeros(1), [1.0], 10, -1.0)
    with pytest.raises(TypeError, match="'x0' = dtype int64: must be float32 or float64"):
        hgs.simulate(hgs.ASGD(), e1_grad, np.zeros(1, np.int64), [1.0], 10, 0.1)
    with pytest.raises(TypeError, match="'grad' = 3: must be a callable grad"):
        hgs.simulate(hgs.ASGD(), 3, np.zeros(1), [1.0], 10, 0.1)
    with pytest.raises(ValueError, match="'horizon' = 0: must be > 0"):
        hgs.simulate(hgs.ASGD(), e1_grad, np.zeros(1), [1.0], 0, 0.1)


def bad_grad(result):
    def grad(x, worker, job):
        return result(x) if job == 2 and worker == 1 else x - 1.0
    return grad


@pytest.mark.parametrize("result,kind,words", [
    (lambda x: np.zeros(4), ValueError,
     ["'grad(x, worker=1, job=2)' = an array of shape (4,)", "must have x0's shape (3,)"]),
    (lambda x: np.zeros((3, 1)), ValueError, ["shape (3, 1)", "x0's shape (3,)"]),
    (lambda x: np.zeros(3, np.int32), TypeError, ["'grad(x, worker=1, job=2)' = dtype int32",
                                                  "must be float32 or float64"]),
    (lambda x: [0.0, 0.0, 0.0], TypeError, ["'grad(x, worker=1, job=2)' = a list",
                                            "numpy array of x0's shape (3,)"]),
    (lambda x: np.zeros(6)[::2], ValueError, ["non-contiguous", "C-contiguous"]),
])
def test_a_wrong_gradient_names_grad_and_the_rule(result, kind, words):
    x0 = np.arange(3.0)
    before = x0.copy()
    with pytest.raises(kind) as e:
        hgs.simulate(hgs.ASGD(), bad_grad(result), x0, [1.0, 1.5], horizon=20, lr=0.1)
    for w in words:
        assert w in str(e.value)
    assert np.array_equal(x0, before)


def test_a_callback_that_raises_raises_its_exception_and_changes_nothing():
    class Boom(Exception):
        pass

    def grad(x, worker, job):
        if job == 3:
            raise Boom("the model diverged")
        return x - 1.0

    x0 = np.arange(3.0)
    with pytest.raises(Boom, match="the model diverged") as e:
        hgs.simulate(hgs.Ringmaster(), grad, x0, [1.0, 2.0], horizon=50, lr=0.1)
    assert any("callback 'grad' (worker 0, job 3)" in n for n in getattr(e.value, "__notes__", []))
    assert np.array_equal(x0, np.arange(3.0))
    with pytest.raises(ZeroDivisionError):
        hgs.simulate(hgs.ASGD(), e1_grad, np.zeros(1), [1.0], 10, 0.1, eval_interval=1.0,
                     eval=lambda x: 1 / 0)
    # The module is usable afterwards, and gives the same run as ever.
    a = hgs.simulate(hgs.Ringmaster(), worst_case_grad(3), x0, [1.0, 2.0], horizon=50, lr=0.1)
    b = hgs.simulate(hgs.Ringmaster(), hgs.worst_case_quadratic(3), x0, [1.0, 2.0], horizon=50, lr=0.1)
    assert a.x.tobytes() == b.x.tobytes()


def test_nonfinite_gradients_meet_the_servers_policy():
    def grad(x, worker, job):
        g = x - 1.0
        if worker == 0 and job == 4:
            g[1] = np.nan
        return g

    with pytest.raises(ValueError, match="asgd"):
        hgs.simulate(hgs.ASGD(), grad, np.zeros(3), [1.0, 2.0], horizon=20, lr=0.1)
    r = hgs.simulate(hgs.ASGD(), grad, np.zeros(3), [1.0, 2.0], horizon=20, lr=0.1, nonfinite="skip")
    assert r.nonfinite_skipped == 1 and r.discarded.tolist() == [1, 0]
    assert np.all(np.isfinite(r.x))


def test_keyboard_interrupt_in_a_callback_stops_the_run():
    calls = []

    def grad(x, worker, job):
        calls.append(job)
        if len(calls) == 50:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C: Python's handler raises here
        return x - 1.0

    with pytest.raises(KeyboardInterrupt):
        hgs.simulate(hgs.ASGD(), grad, np.zeros(2), [1.0, 2.0], horizon=1e6, lr=0.1)
    assert len(calls) == 50
    r = hgs.simulate(hgs.ASGD(), hgs.worst_case_quadratic(2), np.zeros(2), [1.0, 2.0], 10, 0.1)
    assert r.updates == 15


def test_ctrl_c_stops_a_run_of_a_cxx_problem():
    # No Python runs during this run: the event loop checks for signals every 1024 jobs. Without
    # the check it would run for minutes.
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    t0 = time.perf_counter()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            hgs.simulate(hgs.ASGD(), hgs.worst_case_quadratic(2), np.zeros(2), [1.0, 2.0],
                         horizon=1e9, lr=0.1)
    finally:
        timer.cancel()
    assert time.perf_counter() - t0 < 10


def test_the_example_runs_at_a_tiny_size():
    example = Path(__file__).resolve().parents[2] / "examples" / "python" / "simulate.py"
    out = subprocess.run([sys.executable, str(example), "--tiny"], capture_output=True,
                         text=True, timeout=120, env=os.environ.copy())
    assert out.returncode == 0, out.stderr
    for label in ("Ringmaster R=8, interrupt", "Rennala B=8", "local SGD H=2"):
        assert label in out.stdout


def test_a_torch_tensor_result_takes_the_dlpack_path():
    torch = pytest.importorskip("torch")

    def grad(x, worker, job):
        return torch.from_numpy(x - 1.0)

    a = hgs.simulate(hgs.ASGD(), grad, np.zeros(3), [1.0, 2.0], horizon=20, lr=0.1)
    b = hgs.simulate(hgs.ASGD(), lambda x, w, k: x - 1.0, np.zeros(3), [1.0, 2.0], horizon=20, lr=0.1)
    assert a.updates == 30 and a.x.tobytes() == b.x.tobytes()
