"""Targets of the synchronous family's suite (issues 7 and 22): a rank's local step on device
buffers (the per-rank helpers' state in Thrust device vectors of the OpenMP system, the GPU
rank's code path) runs as fast as on host vectors with the same host policy."""
from report import Target, guard, need


def targets(bench, peers):
    rows = []
    t = "sync: local SGD step on Thrust device vectors / on host vectors (1M floats, Adam)"
    with guard(rows, t):
        host = need(bench, "BM_local_sgd_step", memory=0)
        dev = need(bench, "BM_local_sgd_step", memory=1)
        rows.append(Target(t, dev["items_per_second"] / host["items_per_second"], 0.9,
                           note=f"{dev['items_per_second']:.0f} vs {host['items_per_second']:.0f} steps/s"))
    return rows
