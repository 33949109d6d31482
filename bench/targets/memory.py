"""Targets of the memory suite (foundation issue): the references every kernel is held to."""
from report import Target, gbps, guard, need


def targets(bench, peers):
    rows = []
    upd = lambda t: gbps(need(bench, "BM_update", threads=t))
    # Two threads must draw more bandwidth than one, or every 2-thread figure is suspect.
    name = "memory: update 2 threads / 1 thread"
    with guard(rows, name):
        upd1, upd2 = upd(1), upd(2)
        rows.append(Target(name, upd2 / upd1, 1.05, note=f"{upd2:.1f} vs {upd1:.1f} GB/s"))
    # In-place update pays no write-allocate, so it is the higher, honest ceiling.
    name = "memory: update / triad (2 threads)"
    with guard(rows, name):
        upd2, triad2 = upd(2), gbps(need(bench, "BM_triad", threads=2))
        rows.append(Target(name, upd2 / triad2, 1.0, note=f"{upd2:.1f} vs {triad2:.1f} GB/s"))
    return rows
