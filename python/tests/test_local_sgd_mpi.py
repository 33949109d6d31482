"""heterograd.distributed.LocalSGD under `mpirun -np 3` (local_loop.py; ctest python_distributed,
label mpi): the numbers each rank recorded, checked against this file's own arithmetic in
float64 on the ranks' float32 models:

- every round ends with one model on every rank (FNV-1a of the parameters), and __enter__
  starts every rank from rank 0's model;
- a round's model is the weighted mean sum_i w_i x_i / sum_i w_i of the ranks' models after
  their round's last inner step (weights = batch sizes; per-rank H_i with w_i = b_i H_i);
- with H = 1, plain SGD and weights proportional to the batch sizes (equal, and 4/8/12) the
  run equals synchronous data-parallel SGD on the concatenated batch (recomputed here in
  torch from the recorded batches; equal up to float reassociation);
- DiLoCo's round (Douillard et al. 2023): delta = anchor - average, v <- mu v + delta,
  anchor <- anchor - lr (delta + mu v) (Nesterov), the model becomes the anchor;
- state_dict() / load_state_dict() restore the run: a round replayed from a checkpoint ends on
  the same model bit for bit, and a fresh LocalSGD loading it reports the same state;
- a parameter replaced inside the block and a checkpoint of the wrong shape are refused by
  name, with nothing changed.

The example (examples/python/local_sgd.py --tiny, per-rank batch sizes and DiLoCo) reaches
its target.
"""

import glob
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch

import heterograd._core as core

HERE = pathlib.Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "examples" / "python" / "local_sgd.py"
sys.path.insert(0, str(HERE))
import local_loop  # noqa: E402

B = np.array(local_loop.BATCHES, dtype=np.float64)


def mpirun3(script, *args):
    mpiexec = os.environ.get("HG_MPIEXEC", "")
    if not core.mpi or not mpiexec:
        pytest.skip("needs a build with MPI and HG_MPIEXEC (ctest sets it)")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    cmd = [mpiexec, "-np", "3", "--oversubscribe", sys.executable, str(script), *args]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "loop"
    mpirun3(HERE / "local_loop.py", str(out))
    r = [json.load(open(f"{out}.{k}.json")) for k in range(3)]
    assert [x["rank"] for x in r] == [0, 1, 2] and r[0]["size"] == 3
    return r


def weighted_mean(models, w):
    return np.tensordot(np.asarray(w, np.float64) / np.sum(w), np.asarray(models, np.float64), axes=1)


def check_rounds(r, name, weights):
    """Every round closed on every rank with one model, the weighted mean of the ranks'
    models after their round's last inner step."""
    s = [x[name] for x in r]
    assert len({x["init_hash"] for x in s}) == 1  # rank 0's model broadcast
    assert s[0]["init"] == s[1]["init"] == s[2]["init"]
    assert len({x["hash"] for x in s}) == 1
    ends = [[k for k, done in enumerate(x["synced"]) if done] for x in s]
    assert all(len(e) == s[0]["rounds"] for e in ends)
    for rnd in range(s[0]["rounds"]):
        pre = [x["pre"][ends[i][rnd]] for i, x in enumerate(s)]
        post = [np.array(x["post"][ends[i][rnd]]) for i, x in enumerate(s)]
        assert all(np.array_equal(post[0], p) for p in post)
        want = weighted_mean(pre, weights)
        np.testing.assert_allclose(post[0], want, rtol=1e-5, atol=1e-6)
        # the weights matter: the unweighted mean is far from it
        assert np.max(np.abs(np.mean(pre, axis=0) - want)) > 1e-4
    return s


def test_fedavg_rounds_are_the_batch_weighted_mean_on_every_rank(runs):
    s = check_rounds(runs, "fedavg", B)
    assert s[0]["rounds"] == 2 and s[0]["synced"] == [False, False, True] * 2
    assert s[0]["config"]["outer"] is None and s[0]["config"]["weight"] == 4.0


def test_biased_local_sgd_with_per_rank_steps_weights_b_times_h(runs):
    h = np.array([1, 2, 4], np.float64)
    s = check_rounds(runs, "biased", B * h)
    assert [x["rounds"] for x in s] == [2, 2, 2]
    assert [len(x["synced"]) for x in s] == [2, 4, 8]


def data_parallel(init, data, lr):
    """Synchronous SGD on the concatenation of the ranks' batches (ranks in order)."""
    model = local_loop.make_model(0)
    torch.nn.utils.vector_to_parameters(torch.tensor(init, dtype=torch.float32), model.parameters())
    out = []
    for k in range(len(data[0])):
        x = torch.cat([torch.tensor(d[k][0]) for d in data])
        y = torch.cat([torch.tensor(d[k][1]) for d in data])
        model.zero_grad()
        local_loop.loss_of(model, x, y).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
        out.append(torch.nn.utils.parameters_to_vector(model.parameters()).tolist())
    return out


@pytest.mark.parametrize("name", ["dp_equal", "dp_batch"])
def test_h1_with_batch_weights_is_data_parallel_sgd_on_the_concatenated_batch(runs, name):
    s = [x[name] for x in runs]
    assert [x["synced"] for x in s] == [[True] * 3] * 3
    want = data_parallel(s[0]["init"], [x["data"] for x in s], lr=0.1)
    for k in range(3):
        np.testing.assert_allclose(s[0]["post"][k], want[k], rtol=1e-5, atol=2e-6)
    # each rank alone went elsewhere: the average is what made it data-parallel
    assert np.max(np.abs(np.array(s[1]["pre"][0]) - np.array(want[0]))) > 1e-3


def test_diloco_outer_step_is_nesterov_on_the_pseudo_gradient(runs):
    s = [x["diloco"] for x in runs]
    cfg = s[0]["config"]
    lr, mu = cfg["outer_lr"], cfg["outer_momentum"]
    assert (cfg["outer"], lr, mu) == ("diloco", 0.7, 0.9)
    anchor = np.array(s[0]["init"], np.float64)
    v = np.zeros_like(anchor)
    for rnd, k in enumerate((1, 3)):
        assert all(x["synced"][k] for x in s)
        avg = weighted_mean([x["pre"][k] for x in s], B)
        delta = anchor - avg
        v = mu * v + delta
        anchor = anchor - lr * (delta + mu * v)
        for x in s:
            np.testing.assert_allclose(x["post"][k], anchor, rtol=1e-5, atol=1e-5)
        # the outer step moved the model off the plain average
        assert np.max(np.abs(anchor - avg)) > 1e-3
    sd = s[0]["sd"]
    assert (sd["rounds"], sd["steps"], sd["steps_in_round"], sd["count"]) == (2, 4, 0, 2)
    np.testing.assert_allclose(sd["anchor"], anchor, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sd["slots"][0], v, rtol=1e-4, atol=1e-5)


def test_fedavgm_outer_step_is_heavy_ball_on_the_pseudo_gradient(runs):
    s = [x["fedavgm"] for x in runs]
    cfg = s[0]["config"]
    lr, mu = cfg["outer_lr"], cfg["outer_momentum"]
    assert (cfg["outer"], lr, mu) == ("fedavgm", 1.0, 0.9)
    anchor = np.array(s[0]["init"], np.float64)
    v = np.zeros_like(anchor)
    for k in (1, 3):
        avg = weighted_mean([x["pre"][k] for x in s], B)
        v = mu * v + (anchor - avg)
        anchor = anchor - lr * v
        for x in s:
            np.testing.assert_allclose(x["post"][k], anchor, rtol=1e-5, atol=1e-5)
    # round 2 carried round 1's momentum: the plain average is far from it
    assert np.max(np.abs(anchor - avg)) > 1e-3


def test_a_4_mb_model_is_averaged_across_several_transport_segments(runs):
    s = [x["large"] for x in runs]
    assert len({x["hash"] for x in s}) == 1 and s[0]["rounds"] == 1
    assert all(x["err"] < 5e-6 for x in s), s  # |values| <= 3.02: float32 rounding


def test_the_round_releases_the_gil_and_writes_the_models_own_memory(runs):
    for x in runs[:2]:  # ranks 0 and 1 waited in the allreduce for rank 2's 0.2 s
        g = x["gil"]
        assert g["step_s"] >= 0.1 and g["ticks"] >= 10, g
    assert all(x["gil"]["views"] and x["gil"]["stable"] for x in runs)


def test_a_round_replayed_from_a_checkpoint_ends_on_the_same_model(runs):
    for x in runs:
        d = x["diloco"]
        assert d["again"]["same_post"]
        assert d["again"]["hash"] == d["third"]["hash"]
        assert d["again"]["sd"] == d["third"]["sd"]
        assert d["third"]["sd"]["rounds"] == 3 and d["third"]["sd"] != d["sd"]
        assert d["fresh"] == d["sd"]  # a fresh LocalSGD after load_state_dict
        assert d["fresh_inner"] == d["saved_inner"]
    assert len({x["diloco"]["third"]["hash"] for x in runs}) == 1


def test_a_replaced_parameter_and_a_wrong_checkpoint_are_refused_with_nothing_changed(runs):
    for x in runs:
        r = x["refused"]
        assert r["replaced"].startswith("heterograd: invalid argument 'LocalSGD.params[3]'")
        assert "must stay the view LocalSGD laid it over (1 element" in r["replaced"]
        assert r["unchanged"] and r["state_unchanged"]
        assert "'LocalSGD.state.anchor (elements)' = 5: must be 65" in r["short_anchor"]
        assert "'LocalSGD.state.config.outer' = None: must be this LocalSGD's outer ('diloco')" in r["other_outer"]


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    out = tmp_path_factory.mktemp("example") / "ex"
    mpirun3(EXAMPLE, "--tiny", "--json", str(out))
    r = [json.load(open(f)) for f in sorted(glob.glob(f"{out}.*.json"))]
    assert [x["rank"] for x in r] == [0, 1, 2]
    return r


def test_the_example_trains_to_its_target_with_per_rank_batches(example):
    r = example
    assert [x["batch"] for x in r] == [16, 32, 48]
    assert len({x["hash"] for x in r}) == 1 and len({x["after"]["loss"] for x in r}) == 1
    assert all(x["rounds"] == x["steps"] // x["local_steps"] for x in r)
    before, after = r[0]["before"]["loss"], r[0]["after"]["loss"]
    assert after < 0.5 * before, (before, after)
