"""Models suite: heterograd's epoch time against PyTorch's for the same model, threads, batch,
at every thread count the suite ran (its --threads; bench/compare/torch_mlp.py measures the
thread counts recorded in the suite's JSON)."""
from report import Target, arg_values, guard, need


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
    return rows
