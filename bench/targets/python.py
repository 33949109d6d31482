"""Ratios of the python suite (issue 45), from one run of bench/python_bench.py: the median over
steps of the per-step ratio torch.optim step time / heterograd.optim step time (> 1: heterograd
is faster), measured in the same process with the variants interleaved step by step. Reports
only: the issue sets no target. From bench/python_sim_bench.py (python-peers.json, when run
with the authors' simulator): the time per update of the Ringmaster authors' Python simulator
over heterograd.sim's with the same Python gradient (the issue's target: >= 10x), and the
simulators' own time per gradient call (report)."""
from report import Target, entries, guard

VARIANTS = (("torch_foreach", "foreach"), ("torch_single", "for-loop"), ("torch_fused", "fused"))


def targets(bench, peers):
    rows = []
    for kind in ("sgd", "momentum", "adam"):
        for args, e in sorted(entries(bench, f"BM_python_{kind}"),
                              key=lambda x: (x[0]["layout"], int(x[0]["threads"]))):
            for h, label in (("hg_flat", "flat"), ("hg_tensors", "per-tensor")):
                for v, vlabel in VARIANTS:
                    key = f"{v}_over_{h}"
                    if key not in e:
                        continue
                    t = (f"python: {kind} {args['layout']}, torch {vlabel} / heterograd {label} "
                         f"({args['threads']} thread(s), report)")
                    with guard(rows, t):
                        rows.append(Target(t, e[key], 0.0, note=f"{e[v + '_ms']:.3g} vs "
                                           f"{e[h + '_ms']:.3g} ms"))
    for e in peers.get("benchmarks", []):
        if "authors_over_hg_python" not in e:
            continue
        where = e["name"].replace("BM_python_sim/", "").replace("/d:", ", d = ")
        t = f"python: simulator {where}, authors' / heterograd.sim time per update (Python grad)"
        rows.append(Target(t, e["authors_over_hg_python"], 10.0,
                           note=f"{e['authors_us_per_update']:.0f} vs {e['hg_python_us_per_update']:.0f} us"))
        t = f"python: simulator {where}, authors' / heterograd.sim own time per gradient (report)"
        rows.append(Target(t, e["authors_over_hg_python_sim"], 0.0,
                           note=f"{e['authors_sim_us_per_grad']:.2f} vs {e['hg_python_sim_us_per_grad']:.2f} us"))
    return rows
