"""Targets of the simulator suite (issue 5): the bare engine's event rate and its scaling."""
import math

from report import Target, find, guard, need


def targets(bench, peers):
    def rate(n):
        return need(bench, "BM_engine", workers=n)["items_per_second"]

    def ns(n):
        return 1e9 / rate(n)

    # 1000 workers: context in the notes, when the run has it (--workers may leave it out).
    has_1000 = find(bench, "BM_engine", workers=1000) is not None
    rows = []
    small, large = 10, 10000
    name = "sim: engine events/s at 10000 workers (1 core)"
    with guard(rows, name):
        mid = f"; 1000 workers {rate(1000) / 1e6:.1f}M/s" if has_1000 else ""
        rows.append(Target(name, rate(large) / 1e6, 2.0, unit="M",
                           note=f"{ns(large):.1f} ns/event{mid}"))
    # Cost per event at most logarithmic in the worker count: ns/event divided by log2(n)
    # must not grow from 10 to 10 000 workers (ratio of the two <= 1).
    name = "sim: (ns/event / log2 n) at 10000 vs at 10 workers"
    with guard(rows, name):
        per_log_small = ns(small) / math.log2(small)
        per_log_large = ns(large) / math.log2(large)
        mid = f", {ns(1000):.1f} ns at 1000" if has_1000 else ""
        rows.append(Target(name, per_log_large / per_log_small, 1.0, op="<=",
                           note=f"{ns(small):.1f} ns at 10{mid}, {ns(large):.1f} ns at 10000"))
    return rows
