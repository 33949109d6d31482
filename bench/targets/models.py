"""Models suite: heterograd's epoch time against PyTorch's for the same model, threads, batch,
at every thread count the suite ran (its --threads; bench/compare/torch_mlp.py measures the
thread counts recorded in the suite's JSON)."""
from report import Target, arg_values, entries, guard, need


def targets(bench, peers):
    rows = []
    for name, key in (("BM_mlp_784_256_128_10_adam_step", "mlp_784_256_128_10"),
                      ("BM_softmax_regression_adam_step", "softmax_regression")):
        threads = arg_values(bench, name, "threads")
        if not threads:
            rows.append(Target(f"models: {key}: missing figure '{name}'", None, 1.0))
        for t in threads:
            label = f"models: {key} {t}T PyTorch/heterograd epoch time"
            with guard(rows, label):
                mine = need(bench, name, threads=t)["epoch_seconds"]
                theirs = peers.get(f"{key}/{t}", {}).get("epoch_seconds") if peers else None
                if theirs is None:
                    # No peers file: a failure, as ever; a peers file without this thread
                    # count (run with other --threads): skipped.
                    rows.append(Target(f"models: {key} {t}T epoch s (no PyTorch figure)", None, 1.0,
                                       skipped=f"the peers file has no {t}-thread figure" if peers else ""))
                    continue
                # Speed-up over PyTorch (their time / ours); >= 1 means at least as fast.
                rows.append(Target(label, theirs / mine, 1.0,
                                   note=f"{mine:.2f} s vs PyTorch {theirs:.2f} s"))
    rows += torch_targets(bench, peers)
    return rows


PRESETS = ((0, "lenet5"), (1, "resnet8"), (2, "transformer"))


def torch_targets(bench, peers):
    """The LibTorch presets (models_torch.cpp, built with the torch component): heterograd's step
    against a plain LibTorch loop on the same threads (overhead <= 5%: ratio >= 0.95), and its
    local SGD against PyTorch's DDP on Gloo in samples per second (>= 1.0 at H = 1)."""
    rows = []
    if not entries(bench, "BM_torch_plain_step"):
        rows.append(Target("models: LibTorch presets", None, 1.0,
                           skipped="hg-bench-models built without the torch component (-DHG_WITH_LIBTORCH=ON)"))
        return rows
    for p, name in PRESETS:
        def sps(base, **args):
            return need(bench, base, preset=p, **args)["samples_per_second"]

        # Side by side (BM_torch_overhead): the machine's drift falls on both loops.
        for kind, label in ((1, f"models: {name} local SGD H=8 over 2 inproc ranks / plain LibTorch on 2 threads"),
                            (0, f"models: {name} asynchronous worker's job / plain LibTorch step, 1 thread")):
            with guard(rows, label):
                e = need(bench, "BM_torch_overhead", preset=p, kind=kind)
                rows.append(Target(label, e["ratio"], 0.95,
                                   note=f"{e['heterograd_seconds']:.1f} s vs {e['plain_seconds']:.1f} s, side by side"))
        if name == "transformer":  # the DDP comparison is on the image presets
            continue
        ddp = peers.get(f"ddp/{name}", {}).get("samples_per_second") if peers else None
        for h in (1, 8):
            label = f"models: {name} local SGD H={h} 2 ranks / PyTorch DDP Gloo 2 processes (samples/s)"
            with guard(rows, label):
                mine = sps("BM_torch_local_sgd_step", ranks=2, period=h)
                if ddp is None:
                    rows.append(Target(label, None, 1.0, skipped="" if not peers else "the peers file has no DDP figure"))
                    continue
                rows.append(Target(label, mine / ddp, 1.0, note=f"{mine:.0f} vs DDP {ddp:.0f} samples/s"))
            label = f"models: {name} local SGD H={h} 2 MPI ranks / PyTorch DDP Gloo 2 processes (samples/s)"
            mpi = peers.get(f"hg_mpi/{name}/{h}", {}).get("samples_per_second") if peers else None
            if ddp is None or mpi is None:
                rows.append(Target(label, None, 1.0, skipped="no MPI figure (mpirun or the torch+mpi build missing)"
                                   if peers and ddp is not None else "" if not peers else "the peers file has no DDP figure"))
            else:
                rows.append(Target(label, mpi / ddp, 1.0, note=f"{mpi:.0f} vs DDP {ddp:.0f} samples/s"))
    return rows
