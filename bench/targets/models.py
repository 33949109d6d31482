"""Models suite: heterograd's epoch time against PyTorch's for the same model, threads, batch."""
from report import Target


def targets(bench, peers):
    rows = []
    for name, key in (("BM_mlp_784_256_128_10_adam_step", "mlp_784_256_128_10"),
                      ("BM_softmax_regression_adam_step", "softmax_regression")):
        for t in (1, 2):
            ours = bench[f"{name}/{t}/min_time:{'2.000' if 'mlp' in name else '1.000'}/real_time"]
            mine = ours["epoch_seconds"]
            theirs = peers.get(f"{key}/{t}", {}).get("epoch_seconds") if peers else None
            if theirs is None:
                rows.append(Target(f"models: {key} {t}T epoch s (no PyTorch figure)", None, 1.0))
                continue
            # Speed-up over PyTorch (their time / ours); >= 1 means at least as fast.
            rows.append(Target(f"models: {key} {t}T PyTorch/heterograd epoch time", theirs / mine,
                               1.0, note=f"{mine:.2f} s vs PyTorch {theirs:.2f} s"))
    return rows
