"""Targets of the memory suite (foundation issue): the references every kernel is held to."""
from report import Target, gbps


def targets(bench, peers):
    upd1, upd2 = gbps(bench["BM_update/1/min_time:0.500/real_time"]), gbps(bench["BM_update/2/min_time:0.500/real_time"])
    triad2 = gbps(bench["BM_triad/2/min_time:0.500/real_time"])
    return [
        # Two threads must draw more bandwidth than one, or every 2-thread figure is suspect.
        Target("memory: update 2 threads / 1 thread", upd2 / upd1, 1.05,
               note=f"{upd2:.1f} vs {upd1:.1f} GB/s"),
        # In-place update pays no write-allocate, so it is the higher, honest ceiling.
        Target("memory: update / triad (2 threads)", upd2 / triad2, 1.0,
               note=f"{upd2:.1f} vs {triad2:.1f} GB/s"),
    ]
