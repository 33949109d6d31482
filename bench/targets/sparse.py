"""Targets of the sparse suite (issue 11): the hybrid aggregator's bytes against dense, the
codecs' wire sizes, the LSH layer's samples/s against the dense layer, the composite
transport's allreduce against the flat one. Each target is evaluated when its benchmarks ran
(the suite may be filtered), at the widths and thread counts the run measured."""
from report import Target, arg_values, find


def targets(bench, peers):
    rows = []
    for w in arg_values(bench, "BM_hybrid_step", "width"):
        b = find(bench, "BM_hybrid_step", width=w)
        # Parallax (#12): an embedding with 1% of rows touched moves < 5% of the dense bytes.
        rows.append(Target(f"sparse: hybrid bytes / dense bytes, width {w}, 1% rows", b["bytes_ratio"],
                           0.05, op="<=", note=f"{b['bytes_per_step'] / 1e3:.1f} kB per step"))
        d = find(bench, "BM_dense_table_step", width=w)
        if d is not None:
            rows.append(Target(f"sparse: hybrid steps/s / all-dense steps/s, width {w}",
                               b["steps_per_s"] / d["steps_per_s"], 1.0))
    t = find(bench, "BM_codec_top_k_1pct")
    if t is not None:
        # k = ceil(n / 100) (index, value) pairs: 2 ceil(n / 100) / n of the dense bytes.
        rows.append(Target("compress: top-k 1% message / dense bytes", t["wire_ratio"], 2 * 10486 / 2**20 + 1e-9,
                           op="<=", note="k (index, value) pairs of 1M floats"))
    lsh = find(bench, "BM_lsh_layer_train", threads=1)
    dense = find(bench, "BM_dense_layer_train")
    if lsh is not None and dense is not None:
        # SLIDE (#11): training over ~7% of the neurons beats the dense layer on the same core.
        rows.append(Target("nn: LSH layer samples/s / dense (BLAS) samples/s, 10k classes",
                           lsh["samples_per_s"] / dense["samples_per_s"], 1.0,
                           note=f"{lsh['samples_per_s']:.0f} vs {dense['samples_per_s']:.0f} samples/s, "
                                f"{100 * lsh['active_fraction']:.1f}% active"))
    flat = find(bench, "BM_allreduce_4_ranks", rails=0)
    comp = find(bench, "BM_allreduce_4_ranks", rails=2)
    if flat is not None and comp is not None:
        # Inside one process the hierarchy only adds steps; the figure bounds its overhead.
        rows.append(Target("comm: composite (2x2, 2 rails) / flat inproc allreduce time",
                           comp["real_time"] / flat["real_time"], 4.0, op="<="))
    return rows
