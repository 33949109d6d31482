"""Targets of the simulator suite (issue 5): the bare engine's event rate and its scaling."""
import math

from report import Target


def targets(bench, peers):
    def rate(n):
        return bench[f"BM_engine/{n}/min_time:0.500"]["items_per_second"]

    def ns(n):
        return 1e9 / rate(n)

    small, large = 10, 10000
    # Cost per event at most logarithmic in the worker count: ns/event divided by log2(n)
    # must not grow from 10 to 10 000 workers (ratio of the two <= 1).
    per_log_small = ns(small) / math.log2(small)
    per_log_large = ns(large) / math.log2(large)
    return [
        Target("sim: engine events/s at 10000 workers (1 core)", rate(large) / 1e6, 2.0,
               unit="M", note=f"{ns(large):.1f} ns/event; 1000 workers {rate(1000) / 1e6:.1f}M/s"),
        Target("sim: (ns/event / log2 n) at 10000 vs at 10 workers", per_log_large / per_log_small,
               1.0, op="<=",
               note=f"{ns(small):.1f} ns at 10, {ns(1000):.1f} ns at 1000, {ns(large):.1f} ns at 10000"),
    ]
